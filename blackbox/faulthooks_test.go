package blackbox

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// invWebhooks is the fault suite's invariant of outbound webhooks.
const invWebhooks = "webhooks"

// webhooksWithin is how long after a phase every delivery committed in it
// must have reached its receiver: past the claim (30 s) of an attempt
// whose outcome the outage kept from being recorded.
const webhooksWithin = 40 * time.Second

// stackHooks is a stack's webhook receiver, with an endpoint of each
// tenant listening to key.revoked (the phases revoke a key of the first
// tenant each).
type stackHooks struct {
	rcv   *receiver
	eps   []hookEndpoint
	paths map[string]string // endpoint id → path
}

// addHooks gives every tenant of st an endpoint at one receiver.
func (st *stack) addHooks() {
	h := &stackHooks{rcv: newReceiver(st.s.t), paths: map[string]string{}}
	for i, tn := range append(append([]*fTenant{}, st.tenants...), st.noisy, st.quiet) {
		e := addEndpoint(st.s.t, st.members[0].current(), tn.nt.LiveKey, h.rcv, fmt.Sprintf("/%s/%d", st.name, i), "key.revoked")
		h.eps = append(h.eps, e)
		h.paths[e.ID] = e.path
	}
	st.hooks = h
}

// withWebhooks runs body while every tenant's endpoint is sent a test
// event every 100 ms through the instances in turn. After it, every
// delivery committed since the phase began — those answered 202, those
// whose answer the outage kept, the revoked keys' — must reach the
// receiver once the store is back: nothing committed is lost.
func withWebhooks(body func(pr *phaseRun)) func(pr *phaseRun) {
	return func(pr *phaseRun) {
		st, h := pr.st, pr.st.hooks
		began := time.Now()
		client := &http.Client{Timeout: 2 * time.Second}
		stop := make(chan struct{})
		var mu sync.Mutex
		var accepted []string // receipt keys of the test events answered 202
		var refused int
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				e, m := h.eps[i%len(h.eps)], st.members[i%len(st.members)]
				wg.Go(func() {
					id, ok := tryPing(client, m.base(), e)
					mu.Lock()
					defer mu.Unlock()
					if ok {
						accepted = append(accepted, e.path+" "+id)
					} else {
						refused++
					}
				})
			}
		})
		body(pr)
		close(stop)
		wg.Wait()
		client.CloseIdleConnections()

		committed := map[string]bool{}
		for _, r := range queryRows(pr.s.t, st.dsn, `SELECT d.endpoint_id::text, 'msg_' || d.event_id::text, ''
			FROM webhook_deliveries AS d JOIN webhook_events AS ev ON ev.id = d.event_id WHERE ev.created_at >= $1`, began) {
			committed[h.paths[r[0]]+" "+r[1]] = true
		}
		for _, k := range accepted {
			if !committed[k] {
				pr.v.add(invWebhooks, "test event %s answered 202 but not in the outbox", k)
			}
		}
		var missing []string
		waited := time.Now()
		for {
			missing = missing[:0]
			got := h.rcv.answered()
			for k := range committed {
				if got[k] == 0 {
					missing = append(missing, k)
				}
			}
			if len(missing) == 0 || time.Since(waited) > webhooksWithin {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if len(missing) > 0 || pr.s.sabotaged(invWebhooks) {
			pr.v.add(invWebhooks, "%d of %d deliveries committed in the phase not received %v after it, e.g. %v", len(missing), len(committed), webhooksWithin, missing[:min(len(missing), 3)])
		}
		pr.s.checks.Add(int64(len(committed) + len(accepted)))
		pr.s.t.Logf("phase %s: webhooks: %d test events accepted, %d refused or unanswered; %d deliveries committed, all received %v after the phase",
			pr.name, len(accepted), refused, len(committed), time.Since(waited).Round(time.Millisecond))
	}
}

// tryPing sends e a test event through the instance at base; it returns
// the event's webhook-id when the instance answered 202.
func tryPing(c *http.Client, base string, e hookEndpoint) (string, bool) {
	req, err := http.NewRequest("POST", base+"/v1/webhooks/"+e.ID+"/test", nil)
	if err != nil {
		return "", false
	}
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, err := c.Do(req)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	var d struct {
		EventID string `json:"event_id"`
	}
	if resp.StatusCode != http.StatusAccepted || json.NewDecoder(resp.Body).Decode(&d) != nil {
		return "", false
	}
	return "msg_" + d.EventID, true
}
