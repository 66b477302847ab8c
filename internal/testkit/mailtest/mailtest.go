// Package mailtest runs a real SMTP server for tests: mailpit
// (github.com/axllent/mailpit, Version), built once into the user's cache
// and started per test on free loopback ports, with an in-test reader of
// the messages it received (its HTTP API). A test that cannot build or
// start it fails; it never skips. Only tests import mailtest.
package mailtest

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is a running mailpit. It accepts any SMTP user and password, or
// none, in clear text too (so that AUTH can be tested on loopback), and
// offers no STARTTLS unless started with TLS.
type Server struct {
	smtpAddr string
	api      string // http://host:port
	implicit bool   // TLS from the first byte
}

// Option changes how Start runs mailpit.
type Option func(*[]string, *Server)

// TLS has mailpit offer STARTTLS with the PEM certificate and key in
// certFile and keyFile.
func TLS(certFile, keyFile string) Option {
	return func(args *[]string, _ *Server) {
		*args = append(*args, "--smtp-tls-cert", certFile, "--smtp-tls-key", keyFile)
	}
}

// ImplicitTLS has mailpit speak TLS from the first byte (smtps://) with
// the PEM certificate and key in certFile and keyFile.
func ImplicitTLS(certFile, keyFile string) Option {
	return func(args *[]string, s *Server) {
		*args = append(*args, "--smtp-tls-cert", certFile, "--smtp-tls-key", keyFile, "--smtp-require-tls")
		s.implicit = true
	}
}

// Start builds mailpit if need be and starts it for t, stopping it when t
// ends. It fails t when mailpit cannot be built or started.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatalf("mailtest: build mailpit %s: %v", Version, err)
	}
	// A free port can be taken between choosing and binding it: try again.
	for attempt := 1; ; attempt++ {
		s, stop, err := start(bin, t.TempDir(), opts)
		if err == nil {
			t.Cleanup(stop)
			return s
		}
		if attempt == 3 {
			t.Fatalf("mailtest: start mailpit: %v", err)
		}
	}
}

// SMTPURL is the server's smtp:// URL (smtps:// with ImplicitTLS),
// without credentials.
func (s *Server) SMTPURL() string {
	if s.implicit {
		return "smtps://" + s.smtpAddr
	}
	return "smtp://" + s.smtpAddr
}

// SMTPAddr is the server's SMTP host:port.
func (s *Server) SMTPAddr() string { return s.smtpAddr }

// start runs mailpit with its database in dir and waits until both its
// SMTP and HTTP listeners answer.
func start(bin, dir string, opts []Option) (*Server, func(), error) {
	smtpAddr, err := freeAddr()
	if err != nil {
		return nil, nil, err
	}
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, nil, err
	}
	s := &Server{smtpAddr: smtpAddr, api: "http://" + httpAddr}
	args := []string{"--smtp", smtpAddr, "--listen", httpAddr,
		"--database", filepath.Join(dir, "mailpit.db"), "--disable-version-check",
		"--smtp-auth-accept-any"}
	for _, o := range opts {
		o(&args, s)
	}
	if !s.implicit {
		// mailpit refuses the flag beside --smtp-require-tls.
		args = append(args, "--smtp-auth-allow-insecure")
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out := &tail{}
	cmd.Stdout, cmd.Stderr = out, out
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("run %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	if err := s.wait(exited); err != nil {
		stop()
		return nil, nil, fmt.Errorf("%w\n%s", err, out.String())
	}
	return s, stop, nil
}

// wait polls until mailpit's /readyz answers 200 and its SMTP port takes a
// connection, for at most 30 s, or until it exits.
func (s *Server) wait(exited <-chan struct{}) error {
	deadline := time.Now().Add(30 * time.Second)
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-exited:
			return errors.New("mailpit exited before answering")
		default:
		}
		if s.ready(client) {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("mailpit did not answer within 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *Server) ready(client *http.Client) bool {
	resp, err := client.Get(s.api + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	c, err := net.DialTimeout("tcp", s.smtpAddr, time.Second)
	if err != nil {
		return false
	}
	if s.implicit {
		// Only to see that it answers: the tests check the certificate.
		c = tls.Client(c, &tls.Config{InsecureSkipVerify: true})
	}
	// Read the greeting, so that mailpit does not log a dropped session
	// before its first line.
	_ = c.SetDeadline(time.Now().Add(time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	return err == nil && strings.HasPrefix(line, "220")
}

// freeAddr is a loopback host:port that was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Addr().(*net.TCPAddr).Port)), nil
}

// Summary is one message in mailpit's list.
type Summary struct {
	ID      string
	From    string   // the address only
	To      []string // addresses only
	Subject string   // decoded
}

// Message is one message as mailpit read it.
type Message struct {
	Summary
	Text     string              // the decoded plain-text body
	Username string              // the SMTP AUTH user, if any
	Headers  map[string][]string // the raw headers
}

// address is mailpit's JSON of a net/mail.Address.
type address struct{ Name, Address string }

type summaryJSON struct {
	ID      string
	From    *address
	To      []address
	Subject string
}

func (j summaryJSON) summary() Summary {
	s := Summary{ID: j.ID, Subject: j.Subject}
	if j.From != nil {
		s.From = j.From.Address
	}
	for _, a := range j.To {
		s.To = append(s.To, a.Address)
	}
	return s
}

// Messages returns the messages mailpit holds, newest first (at most 500).
func (s *Server) Messages(t testing.TB) []Summary {
	t.Helper()
	var list struct{ Messages []summaryJSON }
	s.get(t, "/api/v1/messages?limit=500", &list)
	out := make([]Summary, len(list.Messages))
	for i, m := range list.Messages {
		out[i] = m.summary()
	}
	return out
}

// Message returns the message id, with its text and headers.
func (s *Server) Message(t testing.TB, id string) Message {
	t.Helper()
	var m struct {
		summaryJSON
		Text     string
		Username string
	}
	p := "/api/v1/message/" + url.PathEscape(id)
	s.get(t, p, &m)
	out := Message{Summary: m.summary(), Text: m.Text, Username: m.Username}
	s.get(t, p+"/headers", &out.Headers)
	return out
}

// get decodes the JSON answer to GET path into v, failing t otherwise.
func (s *Server) get(t testing.TB, path string, v any) {
	t.Helper()
	resp, err := http.Get(s.api + path)
	if err != nil {
		t.Fatalf("mailtest: GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("mailtest: GET %s: %s %v: %s", path, resp.Status, err, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("mailtest: GET %s: %v: %s", path, err, body)
	}
}

// tail keeps the first 4 KiB mailpit writes, to show when it fails.
type tail struct {
	mu sync.Mutex
	b  []byte
}

func (w *tail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := 4096 - len(w.b); room > 0 {
		w.b = append(w.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (w *tail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}
