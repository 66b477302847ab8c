package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/tollgate/tollgate/internal/counter"
)

// A Redis Cluster, through go-redis's ClusterClient. What the store adds to
// it, and why:
//
// A script is applied once or not at all. Redis runs a script whole on one
// node or refuses it before running it: MOVED and ASK (another node serves
// the slot), TRYAGAIN (a multi-key request while its slot is half migrated)
// and CLUSTERDOWN are all answered before the script starts. Once a script
// has been written to a connection, any other failure (the connection reset,
// EOF, the deadline, a master killed) leaves it unknown whether it ran: it
// may have been applied and its answer lost. go-redis's ClusterClient
// resends a command on such errors, and in a pipeline resends the whole
// node's part when one command fails on the connection or when the first
// command's reply is TRYAGAIN or CLUSTERDOWN, the others included: a check
// resent after it was applied counts twice. So every script the store sends
// says NoRetry (onceCmd), which turns those resends off while go-redis still
// follows MOVED and ASK; and the store itself resends only what a refusal
// proves did not run (resendable), within the check's deadline.
// (TestClusterReshardExact counts checks twice with NoRetry off.)
//
// What is left is the single server's case, and counter.ErrUnavailable's
// contract: a script applied whose answer was lost reaches the caller as
// ErrUnavailable (its fail mode decides), and its count stands.
//
// A failover may forget counts: replication is asynchronous, so the writes
// the old master acknowledged and had not yet sent to its replica are gone
// once the replica is promoted, and the counters of that shard's tenants
// read as if those checks never happened (a few milliseconds of them).
//
// After a failover go-redis keeps sending a slot to its old master until it
// reloads the slot map, which it does on MOVED and ASK but not on a refused
// connection; the store asks for a reload (ReloadState, which go-redis
// coalesces) when a check fails on the connection or with CLUSTERDOWN, so a
// promoted replica serves within moments of its promotion, not at the next
// periodic reload.
//
// Checks wait for a sender in a queue per master (lane, coalesce.go), so
// that a master that stops answering holds up only its own tenants.

// Schemes of cluster URLs, and the go-redis schemes they stand for.
var clusterSchemes = map[string]string{"redis+cluster": "redis", "rediss+cluster": "rediss"}

// singleSchemes are the schemes of one server's URL.
var singleSchemes = []string{"redis", "rediss"}

// CheckURL reports whether New accepts raw, without connecting: a scheme
// of Config.URL, a host, and every address a host and a port from 1 to
// 65535. A URL that can never connect is refused here, not answered with
// checks that fail open for ever. The error never holds the password.
func CheckURL(raw string) error {
	_, _, err := parseOptions(raw)
	return err
}

// parseOptions parses a URL as New does: a cluster's options, or one
// server's.
func parseOptions(raw string) (*goredis.ClusterOptions, *goredis.Options, error) {
	cluster, goURL, err := parseScheme(raw)
	if err != nil {
		return nil, nil, err
	}
	if cluster {
		opt, err := goredis.ParseClusterURL(goURL)
		if err != nil {
			return nil, nil, fmt.Errorf("redis url: %s", err.Error())
		}
		for _, a := range opt.Addrs {
			if err := checkAddr(a); err != nil {
				return nil, nil, err
			}
		}
		return opt, nil, nil
	}
	opt, err := goredis.ParseURL(goURL)
	if err != nil {
		// go-redis names the offending part (scheme, database, option); its
		// error type stays here.
		return nil, nil, fmt.Errorf("redis url: %s", err.Error())
	}
	if err := checkAddr(opt.Addr); err != nil {
		return nil, nil, err
	}
	return nil, opt, nil
}

// checkAddr refuses an address no dial can reach: not host:port, no host,
// or a port outside 1 to 65535.
func checkAddr(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" {
		return fmt.Errorf("redis url: address %q: want host:port", a)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("redis url: address %q: want a port from 1 to 65535", a)
	}
	return nil
}

// parseScheme tells a cluster URL from a single server's and returns the URL
// go-redis parses. A cluster's seeds may be written as comma-separated
// hosts, as many tools write several hosts
// (redis+cluster://h1:7000,h2:7000,h3:7000); they become addr parameters,
// go-redis's form. One server's URL naming several hosts is refused: it
// would dial one address that is no host.
func parseScheme(raw string) (cluster bool, goURL string, err error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	plain, cluster := clusterSchemes[scheme]
	if !ok || (!cluster && !slices.Contains(singleSchemes, scheme)) {
		return false, "", errors.New("redis url: want the scheme redis://, rediss://, redis+cluster:// or rediss+cluster://")
	}
	// The authority ends at the path, query or fragment; its hosts follow
	// the userinfo's last "@" (a password may hold commas, escaped or not).
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	userinfo, hosts := "", authority
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo, hosts = authority[:at+1], authority[at+1:]
	}
	for h := range strings.SplitSeq(hosts, ",") {
		// A port that is no number would fail url.Parse, which says less.
		if _, port, err := net.SplitHostPort(h); err == nil && port != "" {
			if err := checkAddr(h); err != nil {
				return false, "", err
			}
		}
	}
	var more []string
	if first, others, several := strings.Cut(hosts, ","); several {
		if !cluster {
			return false, "", fmt.Errorf("redis url: several hosts (%s) name a cluster: write redis+cluster://", hosts)
		}
		hosts, more = first, strings.Split(others, ",")
		for _, h := range append([]string{first}, more...) {
			if h == "" {
				return false, "", fmt.Errorf("redis url: an empty host in %q", authority[len(userinfo):])
			}
		}
	}
	u, err := url.Parse(scheme + "://" + userinfo + hosts + tail)
	if err != nil {
		// url.Error quotes the whole URL, password included.
		return false, "", errors.New("redis url: not a URL")
	}
	if u.Host == "" {
		return false, "", errors.New("redis url: no host")
	}
	if !cluster {
		return false, u.String(), nil
	}
	if p := strings.TrimPrefix(u.Path, "/"); p != "" && p != "0" {
		return false, "", fmt.Errorf("redis url: database %q: a cluster has database 0 only", p)
	}
	if len(more) > 0 {
		q := u.Query()
		// The hosts after commas are seeds like those of addr, before them.
		q["addr"] = append(more, q["addr"]...)
		u.RawQuery = q.Encode()
	}
	u.Scheme = plain
	u.Path = ""
	return true, u.String(), nil
}

// boundCluster bounds a cluster's options like a single server's client.
func boundCluster(opt *goredis.ClusterOptions, timeout time.Duration, dial dialer) {
	opt.ContextTimeoutEnabled = true
	// Node clients never retry; the cluster client resends only what
	// onceCmd lets it (MOVED and ASK), at most MaxRedirects times.
	opt.MaxRetries = -1
	opt.MaxRedirects = 3
	opt.DialTimeout = timeout
	opt.DialerRetries = 1
	opt.ReadTimeout = 2 * timeout // as bound does
	opt.WriteTimeout = 2 * timeout
	opt.PoolTimeout = timeout
	opt.DisableIdentity = true
	opt.Protocol = protocol
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	// Scripts have keys and go by their slot; the request-policy routing
	// would first fetch COMMAND's table from a node, a round trip that
	// decides nothing here.
	opt.DisableRoutingPolicies = true
	if dial != nil {
		opt.Dialer = dial
	}
}

// verifyTimeout bounds each step of Verify (dialing, TLS, INFO), which runs
// once at start-up and may take longer than a check.
const verifyTimeout = 5 * time.Second

// seedOptions is a plain client's options for one seed of a cluster, for
// Verify.
func seedOptions(c *goredis.ClusterOptions, addr string) *goredis.Options {
	o := &goredis.Options{
		Addr:            addr,
		Username:        c.Username,
		Password:        c.Password,
		TLSConfig:       c.TLSConfig,
		Dialer:          c.Dialer,
		DisableIdentity: true,
		Protocol:        c.Protocol,
	}
	bound(o, verifyTimeout)
	return o
}

// onceCmd is a script go-redis must not resend on its own (see above).
type onceCmd struct{ *goredis.Cmd }

// NoRetry tells go-redis not to resend the command after it may have run.
func (onceCmd) NoRetry() bool { return true }

// resendable reports whether err is a cluster's refusal of a script that did
// not run, which may be sent again: TRYAGAIN (its slot is being migrated and
// its keys are split between the nodes, which lasts while the keys move), or
// MOVED and ASK still standing after go-redis followed MaxRedirects of them.
// CLUSTERDOWN is not resent: it lasts seconds, not the milliseconds of a
// check's deadline.
func resendable(err error) bool {
	return err != nil && (goredis.HasErrorPrefix(err, "TRYAGAIN") || goredis.HasErrorPrefix(err, "MOVED") ||
		goredis.HasErrorPrefix(err, "ASK"))
}

// afterFailure asks go-redis to reload the cluster's slot map when err says
// a node is gone or the cluster is down: a failover moves slots without the
// MOVED replies that reload it otherwise. go-redis coalesces the reloads.
func (s *Store) afterFailure(err error) {
	if s.cluster == nil || err == nil {
		return
	}
	var rerr goredis.Error
	if !errors.As(err, &rerr) || goredis.HasErrorPrefix(err, "CLUSTERDOWN") {
		s.cluster.ReloadState(context.Background())
	}
}

// resendPause is how long the store waits before sending a refused script
// again, the n-th time: a slot's keys migrate in milliseconds. (The shift
// is bounded: past 43 doublings a millisecond overflows, and a negative
// pause would resend at once, over and over.)
func resendPause(n int) time.Duration {
	return time.Millisecond << min(n, 3)
}

// Verify asks each server the URL names whether it is in cluster mode, under
// ctx. It returns an error wrapping ErrWrongMode, naming the server, when a
// server's mode does not match the URL (a redis:// URL at a cluster node or
// a redis+cluster:// URL at a server without cluster mode), and one wrapping
// counter.ErrUnavailable when no server it names answers. Servers that do not
// answer are not judged.
func (s *Store) Verify(ctx context.Context) error {
	var firstErr error
	answered := false
	for _, o := range s.seeds {
		enabled, err := clusterEnabled(ctx, o)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		answered = true
		switch {
		case s.cluster != nil && !enabled:
			return fmt.Errorf("the URL names a cluster (redis+cluster://) but %s is not in cluster mode; name one server with redis://: %w", o.Addr, ErrWrongMode)
		case s.cluster == nil && enabled:
			return fmt.Errorf("the URL names one server (redis://) but %s is a Redis Cluster node; name the cluster with redis+cluster://: %w", o.Addr, ErrWrongMode)
		}
	}
	if !answered {
		return fmt.Errorf("verify redis: %w: %s", counter.ErrUnavailable, firstErr.Error())
	}
	return nil
}

// clusterEnabled reads cluster_enabled from the server's INFO, which every
// Redis answers, in cluster mode or not.
func clusterEnabled(ctx context.Context, o *goredis.Options) (bool, error) {
	c := goredis.NewClient(o)
	defer c.Close()
	info, err := c.Info(ctx, "cluster").Result()
	if err != nil {
		return false, fmt.Errorf("%s: %s", o.Addr, err.Error())
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_enabled:"); ok {
			return v == "1", nil
		}
	}
	return false, nil
}
