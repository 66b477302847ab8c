package blackbox

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The hostile-neighbour phases (issue 36): one phase for each resource
// the parties of an instance share, in which a neighbour, keyed or not,
// takes as much of it as it can beside the mixed workload and the quiet
// tenant's "2 an hour". Nothing is excused while it does: no degraded
// answer, no 503, no answer slower than the store deadline and its margin,
// and the quiet tenant's counts exact (quietInvariants). Each attack holds
// itself to its share too (invHostile): what it was answered says whether
// the instance let it take more.

// invHostile is the invariant the attacks hold themselves to.
const invHostile = "hostile"

func init() {
	invariants[invHostile] = "a hostile neighbour gets only its share: a keyless /v1 body is never read, a tenant's bodies stop at its share"
}

// hostileNeighbour is a phase body: the quiet tenant checks beside the
// mixed workload, alone, then beside attack for floodFor (attack returns
// once stop is closed), then alone again.
func hostileNeighbour(attack func(pr *phaseRun, stop <-chan struct{})) func(pr *phaseRun) {
	return func(pr *phaseRun) {
		stopQuiet := pr.startQuiet()
		time.Sleep(quietFor)
		stop, done := make(chan struct{}), make(chan struct{})
		pr.mu.Lock()
		pr.attacks = append(pr.attacks, interval{from: time.Now()})
		pr.mu.Unlock()
		go func() {
			defer close(done)
			attack(pr, stop)
		}()
		time.Sleep(floodFor)
		close(stop)
		<-done
		pr.mu.Lock()
		pr.attacks[len(pr.attacks)-1].to = time.Now()
		pr.mu.Unlock()
		time.Sleep(quietFor)
		stopQuiet()
	}
}

// underAttack reports whether [from, to] overlaps an attack of the phase.
func (pr *phaseRun) underAttack(from, to time.Time) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for _, a := range pr.attacks {
		if a.overlaps(from, to) {
			return true
		}
	}
	return false
}

// stalled is a request whose headers were sent and whose body never is:
// what a client trickling a body looks like to the server.
type stalled struct {
	// status is the answer's (0: none before the attack stopped), after
	// took.
	status int
	took   time.Duration
}

// stall sends head (nothing, when "") to base from the loopback address
// from (every 127.0.0.0/8 address is the machine's, and a client of its
// own to the server) and waits for an answer until stop.
func stall(base, from, head string, stop <-chan struct{}) (stalled, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	conn, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		return stalled{}, err
	}
	defer conn.Close()
	start := time.Now()
	if _, err := io.WriteString(conn, head); head != "" && err != nil {
		return stalled{}, err
	}
	br := bufio.NewReader(conn)
	for {
		select {
		case <-stop:
			return stalled{took: time.Since(start)}, nil
		default:
		}
		conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := br.Peek(1); err == nil {
			break
		} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			// Closed without an answer.
			return stalled{took: time.Since(start)}, nil
		}
	}
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return stalled{took: time.Since(start)}, nil
	}
	resp.Body.Close()
	return stalled{status: resp.StatusCode, took: time.Since(start)}, nil
}

// stallHead is the head of a POST to path with key (none when "") and
// extra headers, declaring length bytes of body, or a chunked body whose
// first chunk it sends when length is negative.
func stallHead(path, key string, length int, extra ...string) string {
	h := "POST " + path + " HTTP/1.1\r\nHost: tollgate.test\r\nContent-Type: application/json\r\n"
	if key != "" {
		h += "Authorization: Bearer " + key + "\r\n"
	}
	for _, x := range extra {
		h += x + "\r\n"
	}
	if length < 0 {
		return h + "Transfer-Encoding: chunked\r\n\r\n1\r\n{\r\n"
	}
	return h + fmt.Sprintf("Content-Length: %d\r\n\r\n", length)
}

// attackers runs n workers against member 0 of pr's stack until stop, each
// from one of addrs loopback addresses (the first, 127.0.1.2, and from
// after the first skip of them), making the request head(worker, i)
// over and over, each two seconds after the last was answered, and
// hands every outcome to seen.
func (pr *phaseRun) attackers(stop <-chan struct{}, n, skip, addrs int, head func(worker, i int) string, seen func(worker int, head string, s stalled)) {
	m := pr.st.members[0]
	var wg sync.WaitGroup
	for w := range n {
		a := skip + w%addrs
		from := fmt.Sprintf("127.0.%d.%d", 1+a/250, 2+a%250)
		wg.Go(func() {
			// Started over a quarter of a second, not in one burst: what
			// is measured is what the connections hold, not how the box
			// (the attackers' CPU is its CPU too) takes a burst of dials.
			time.Sleep(time.Duration(w) * 250 * time.Millisecond / time.Duration(n))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				h := head(w, i)
				s, err := stall(m.base(), from, h, stop)
				if err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				seen(w, h, s)
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Second):
				}
			}
		})
	}
	wg.Wait()
}

// keylessBodies is issue 36's first attack: 17 addresses keep 32
// connections each to an instance that send only the headers of a /v1
// request declaring a 64 KiB body (a check, a chunked batch, a policy) and
// no API key, as many as filled the instance's body bytes before, which
// made every tenant's checks 503 (with 2 more addresses' 1 KiB ones to
// close the last gap); and 8 more addresses keep 20 each that
// declare a 64 KiB sign-in form to the dashboard. A /v1 body without a key
// is never read: each is answered at once (401, or the pre-authentication
// bucket's 429). The forms share the keyless pool by address, held or
// refused there, and tenants never wait for it.
func keylessBodies(pr *phaseRun, stop <-chan struct{}) {
	heads := []string{
		stallHead("/v1/check", "", 64<<10),
		stallHead("/v1/check/batch", "", -1),
		strings.Replace(stallHead("/v1/policies/x", "", 64<<10), "POST", "PUT", 1),
	}
	form := strings.Replace(stallHead("/admin/login", "", 64<<10), "application/json", "application/x-www-form-urlencoded", 1)
	var mu sync.Mutex
	counts := map[string]int{}
	seen := func(_ int, head string, s stalled) {
		path := strings.Fields(head)[1]
		mu.Lock()
		counts[fmt.Sprintf("%s:%d", path, s.status)]++
		mu.Unlock()
		if !strings.HasPrefix(path, "/v1/") || s.status == 0 && s.took <= 2*time.Second {
			// Not the tenant API's, or cut short by the attack's end.
			return
		}
		ok := (s.status == 401 || s.status == 429) && s.took <= 2*time.Second
		if !ok || pr.s.sabotaged(invHostile) && s.status == 401 {
			pr.v.add(invHostile, "a keyless %s was answered %d after %v (0: held): its body was waited for", path, s.status, s.took.Round(time.Millisecond))
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		pr.attackers(stop, 17*32, 0, 17, func(w, i int) string { return heads[(w+i)%len(heads)] }, seen)
	})
	wg.Go(func() {
		pr.attackers(stop, 8*20, 17, 8, func(int, int) string { return form }, seen)
	})
	// And the bodies that close the last gap between the 64 KiB ones.
	gap := stallHead("/v1/check", "", 1<<10)
	wg.Go(func() {
		pr.attackers(stop, 2*32, 25, 2, func(int, int) string { return gap }, seen)
	})
	wg.Wait()
	pr.s.t.Logf("phase %s: keyless attackers answered %v", pr.name, counts)
}

// tenantBodies: the noisy tenant stalls batches of unknown length from 32
// connections (8 addresses) to an instance, as many as its key lets it.
// Its share of body bytes (4 MiB) holds three of them (1 MiB and a byte
// each); the others are refused at once (429), and the other tenants'
// bodies are never refused for it.
func tenantBodies(pr *phaseRun, stop <-chan struct{}) {
	key := pr.st.noisy.nt.LiveKey
	var mu sync.Mutex
	counts := map[int]int{}
	pr.attackers(stop, 32, 0, 8, func(int, int) string { return stallHead("/v1/check/batch", key, -1) },
		func(_ int, _ string, s stalled) {
			mu.Lock()
			counts[s.status]++
			mu.Unlock()
		})
	// Held until the attack stopped: at most the tenant's share.
	if held := counts[0]; held > 3 || pr.s.sabotaged(invHostile) {
		pr.v.add(invHostile, "the noisy tenant held %d stalled batches at once, more than the 3 its share holds (answers %v)", held, counts)
	}
	pr.s.t.Logf("phase %s: the noisy tenant's stalled batches answered %v", pr.name, counts)
}

// keylessConns: 20 addresses open 256 connections each to an instance and
// send nothing on them, more than the keyless total (4,096) holds. Each
// address gets its share until the total is full; then the tenants' new
// connections take the places of idle ones, and the instance never holds
// more than the total of connections without a key.
func keylessConns(pr *phaseRun, stop <-chan struct{}) {
	var mu sync.Mutex
	counts := map[int]int{}
	var wg sync.WaitGroup
	wg.Go(func() {
		pr.attackers(stop, 20*256, 40, 20, func(int, int) string { return "" }, func(_ int, _ string, s stalled) {
			mu.Lock()
			counts[s.status]++
			mu.Unlock()
		})
	})
	// Half-way through the attack: what the instance holds.
	select {
	case <-stop:
	case <-time.After(floodFor / 2):
		held, ok := pr.st.gauge(pr.st.members[0], `tollgate_http_connections{party="keyless"}`)
		if !ok || held > 4096 || pr.s.sabotaged(invHostile) {
			pr.v.add(invHostile, "the instance holds %v keyless connections (found %v), more than its total of 4096", held, ok)
		}
		pr.s.t.Logf("phase %s: %v keyless connections held half-way through", pr.name, held)
	}
	wg.Wait()
	pr.s.t.Logf("phase %s: idle keyless connections answered %v (0: held, or closed for a newcomer)", pr.name, counts)
}

// gauge reads the value of the metric line named name (with its labels)
// from m's /metrics.
func (st *stack) gauge(m *member, name string) (float64, bool) {
	resp, err := http.Get(m.base() + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f, true
			}
		}
	}
	return 0, false
}

// newSubjects is issue 36's fifth attack, on a store of 1,000 counters in
// memory shared by six parties (the quiet, noisy and three workload
// tenants, and the keyless): the quiet tenant checks 100 subjects of its
// "2 an hour" twice each (with the 10 startQuiet checks, within its share
// of about 166); then the noisy tenant checks new subjects, one after the
// other, from 16 connections, many times the store's bound; then the quiet
// tenant checks each of its 100 once more, and each must be refused, its
// counters kept (quietInvariants). The noisy tenant forgets its own.
func newSubjects(pr *phaseRun, stop <-chan struct{}) {
	st := pr.st
	m := st.members[0]
	quiet := func(i int) {
		r := &record{phase: pr.name, kind: opCheck, tenant: st.quiet, member: m.idx, quiet: true,
			items: []itemRec{{policy: twoAnHour.name, subject: fmt.Sprintf("%s.idle%d", pr.name, i), cost: 1}}}
		pr.send(r, m, st.quiet.nt.LiveKey)
	}
	for range 2 {
		for i := range 100 {
			quiet(i)
		}
	}
	var wg sync.WaitGroup
	var flooded atomic.Int64
	for g := range 16 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				r := &record{phase: pr.name, kind: opCheck, tenant: st.noisy, member: m.idx,
					items: []itemRec{{policy: hotChecks.name, subject: fmt.Sprintf("%s.new%d.%d", pr.name, g, n), cost: 1}}}
				pr.send(r, m, st.noisy.nt.LiveKey)
				flooded.Add(1)
			}
		})
	}
	wg.Wait()
	for i := range 100 {
		quiet(i)
	}
	if n := flooded.Load(); n < 8000 {
		// Too few to have filled the store many times over: the phase
		// proved nothing.
		pr.v.add(invHostile, "the noisy tenant checked only %d new subjects, want at least 8 times the store's 1,000", n)
	}
	pr.s.t.Logf("phase %s: the noisy tenant checked %d new subjects", pr.name, flooded.Load())
}

// webhooksFair is how soon a bystander's webhook must reach its receiver
// beside tenants whose receivers hang: a claim and a delivery, with room for
// a loaded box, far below the attempt timeout (10 s) a hanging receiver holds
// a delivery in flight for.
const webhooksFair = 5 * time.Second

// hookHostiles are the tenants of hangingWebhooks, made once a stack.
func (st *stack) hookHostiles() []newTenant {
	st.mu.Lock()
	defer st.mu.Unlock()
	for len(st.hostiles) < 7 {
		st.hostiles = append(st.hostiles, createTenant(st.s.t, st.dsn, "pro"))
	}
	return st.hostiles
}

// hangingWebhooks is issue 36's third and fourth attacks, on an instance with
// 64 deliveries in flight at most: seven tenants register five endpoints each
// whose receivers never answer (each attempt is in flight for the 10 s of its
// timeout) and send them test events, 70 deliveries that hang, more than the
// instance's 64; one of them sends one endpoint as many as its key lets it,
// from 8 connections. Meanwhile the workload's tenants are sent a test event
// every 100 ms: each must reach its receiver within webhooksFair of being
// accepted, since a tenant holds at most 8 of an instance's 64 in flight; and
// the flooded endpoint holds at most its bound of 1,000 deliveries waiting
// (about 500 sends fit in the attack on the 2-core box: the bound's refusal
// is TestWebhookOutboxBound's).
func hangingWebhooks(pr *phaseRun, stop <-chan struct{}) {
	st, h := pr.st, pr.st.hooks
	m := st.members[0]
	t := pr.s.t
	var eps []hookEndpoint
	for i, tn := range st.hookHostiles() {
		for j := range 5 {
			path := fmt.Sprintf("/hang/%s/%d/%d", pr.name, i, j)
			h.rcv.hangOn(path)
			eps = append(eps, addEndpoint(t, m.current(), tn.LiveKey, h.rcv, path, "key.revoked"))
		}
	}
	client := &http.Client{Timeout: 2 * time.Second}
	defer func() {
		// Their deliveries go with them, and the hanging attempts end
		// with their timeout.
		for _, e := range eps {
			do(t, "DELETE", m.base()+"/v1/webhooks/"+e.ID, e.key, nil)
			h.rcv.hangOff(e.path)
		}
		client.CloseIdleConnections()
	}()
	for _, e := range eps {
		for range 3 {
			tryPing(client, m.base(), e)
		}
	}
	var wg sync.WaitGroup
	var flood [2]atomic.Int64 // accepted, refused
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, ok := tryPing(client, m.base(), eps[0]); ok {
					flood[0].Add(1)
				} else {
					flood[1].Add(1)
				}
			}
		})
	}
	type sent struct {
		key string
		at  time.Time
	}
	var accepted []sent
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			e := h.eps[i%len(st.tenants)]
			if id, ok := tryPing(client, m.base(), e); ok {
				accepted = append(accepted, sent{e.path + " " + id, time.Now()})
			}
		}
	})
	wg.Wait()

	var late []string
	worst := time.Duration(0)
	// Until every bystander's event arrived, or the last is late.
	for len(accepted) > 0 && time.Now().Before(accepted[len(accepted)-1].at.Add(webhooksFair+time.Second)) {
		got, all := h.rcv.answered(), true
		for _, a := range accepted {
			all = all && got[a.key] > 0
		}
		if all {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	first := map[string]time.Time{}
	for _, rc := range h.rcv.receipts() {
		if k := rc.key(); first[k].IsZero() || rc.start.Before(first[k]) {
			first[k] = rc.start
		}
	}
	for _, a := range accepted {
		took := first[a.key].Sub(a.at)
		if first[a.key].IsZero() {
			took = time.Hour
		}
		worst = max(worst, took)
		if took > webhooksFair || pr.s.sabotaged(invHostile) {
			late = append(late, fmt.Sprintf("%s after %v", a.key, took.Round(time.Millisecond)))
		}
	}
	if len(late) > 0 || len(accepted) == 0 {
		pr.v.add(invHostile, "%d of %d bystanders' test events reached their receivers later than %v beside hanging receivers, e.g. %v", len(late), len(accepted), webhooksFair, late[:min(3, len(late))])
	}
	waiting := queryRows(t, st.dsn, `SELECT count(*)::text, '', '' FROM webhook_deliveries WHERE endpoint_id = $1 AND next_attempt_at IS NOT NULL`, eps[0].ID)[0][0]
	// The bound holds to within the sends made at once (8): two inserts
	// may each see room for one (migration 000025).
	if n, _ := strconv.Atoi(waiting); n > 1000+8 || pr.s.sabotaged(invHostile) {
		pr.v.add(invHostile, "the flooded endpoint holds %s deliveries waiting (its bound 1,000), %d sends accepted and %d refused", waiting, flood[0].Load(), flood[1].Load())
	}
	pr.s.t.Logf("phase %s: %d bystanders' test events, the slowest delivered after %v; the flooded endpoint: %d sends accepted, %d refused, %s waiting",
		pr.name, len(accepted), worst.Round(time.Millisecond), flood[0].Load(), flood[1].Load(), waiting)
}

// batchFlood is issue 36's ninth attack: the noisy tenant sends batches of
// 1,000 checks from 4 connections to every instance, as fast as it is
// answered, while the database is alive. Its answers are not degraded (a
// busy store is not down; see below for the one in twenty allowed), and
// the others' answers stay exact, prompt and undegraded.
func batchFlood(pr *phaseRun, stop <-chan struct{}) {
	st := pr.st
	tn := st.noisy
	checks := make([]any, 1000)
	for i := range checks {
		checks[i] = map[string]any{"items": []any{map[string]any{"policy": hotChecks.name, "subject": fmt.Sprintf("%s.b%d", pr.name, i%50)}}}
	}
	// Encoded once: the attackers' CPU is the box's, and a batch of 1,000
	// is 70 KB of JSON to write.
	body, err := json.Marshal(map[string]any{"checks": checks})
	if err != nil {
		pr.s.t.Fatal(err)
	}
	c := newFaultClient()
	defer c.closeIdle()
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	for _, m := range st.members {
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					a := c.do("POST", m.base()+"/v1/check/batch", tn.nt.LiveKey, json.RawMessage(body))
					what := fmt.Sprint(a.status)
					// Usage counts every check a result decided (not a
					// ceiling's problem, which has a status); a batch
					// without an answer may count any of them.
					var out struct {
						Results []struct {
							Status   int  `json:"status"`
							Degraded bool `json:"degraded"`
						} `json:"results"`
					}
					switch {
					case a.err != nil || a.status >= 500:
						what = "no answer or 5xx"
						tn.counted(false, 0, int64(len(checks)))
					case a.status == 200 && json.Unmarshal(a.body, &out) == nil:
						var decided int64
						for _, r := range out.Results {
							if r.Status == 0 {
								decided++
							}
							if r.Degraded {
								what = "200 degraded"
							}
						}
						tn.counted(false, decided, 0)
					}
					mu.Lock()
					counts[what]++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	// Its own: none degraded but one in twenty at most. On this 2-core
	// box the flood saturates both cores, and in about one cycle of six of
	// a soak one of its statements waits past two deadlines in which no
	// statement of any lane, nor the probe, was answered: the store looks
	// down for that moment (the rule in counter/postgres's await), though
	// only the attacker's work is that slow. Every other tenant's answers
	// are held to the phase's invariants, with nothing excused.
	degraded, answered := counts["200 degraded"], counts["200"]+counts["200 degraded"]
	if 20*degraded > answered || answered == 0 || pr.s.sabotaged(invHostile) {
		pr.v.add(invHostile, "the noisy tenant's batches of 1,000 answered %v: degraded while its store answers, or never answered", counts)
	}
	pr.s.t.Logf("phase %s: the noisy tenant's batches of 1,000 answered %v", pr.name, counts)
}

// resetFlood is the noisy tenant resetting its counters from eight
// connections an instance, as fast as it is answered: on PostgreSQL each
// reset takes one of the connections the store keeps for calls outside its
// lanes (a tenant's calls one at a time an instance, the rest waiting
// their turn), on Redis a place in the lanes the checks use. Every other
// tenant's checks, resets and reservations beside it are held to the
// phase's invariants; the flood holds itself to being answered.
func resetFlood(pr *phaseRun, stop <-chan struct{}) {
	st := pr.st
	tn := st.noisy
	c := newFaultClient()
	defer c.closeIdle()
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	for _, m := range st.members {
		for g := range 8 {
			wg.Go(func() {
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					subject := fmt.Sprintf("%s.r%d", pr.name, (g*7+n)%50)
					a := c.do("DELETE", m.base()+"/v1/policies/"+hotChecks.name+"/subjects/"+subject, tn.nt.LiveKey, nil)
					what := fmt.Sprint(a.status)
					if a.err != nil || a.status >= 500 {
						what = "no answer or 5xx"
					}
					mu.Lock()
					counts[what]++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	// Its own: answered, and not failed as the store's but one in twenty
	// at most (its calls wait behind its own, on a box both of whose
	// cores the flood keeps busy).
	failed, answered := counts["no answer or 5xx"], counts["204"]
	if 20*failed > answered || answered == 0 || pr.s.sabotaged(invHostile) {
		pr.v.add(invHostile, "the noisy tenant's resets answered %v: failed while its store answers, or never answered", counts)
	}
	pr.s.t.Logf("phase %s: the noisy tenant's resets answered %v", pr.name, counts)
}
