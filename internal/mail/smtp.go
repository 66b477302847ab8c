package mail

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/smtp"
	"net/url"
	"os"
	"time"
)

// Timeout bounds one Send, from dialling to the server's answer to QUIT;
// a context deadline that comes sooner wins.
const Timeout = 10 * time.Second

// ErrInsecure is credentials that would cross the network unencrypted: a
// user in the URL, no TLS, and a host that is not loopback.
var ErrInsecure = errors.New("credentials would be sent without TLS")

// STARTTLS policies of an smtp:// URL (?starttls=).
const (
	startTLSOpportunistic = "" // when the server offers it
	startTLSRequire       = "require"
	startTLSOff           = "off"
)

// SMTP is a Sender that hands each message to one SMTP server, one
// connection per message. It is safe for concurrent use.
type SMTP struct {
	addr     string // host:port
	host     string
	implicit bool   // smtps://: TLS from the first byte
	startTLS string // one of the startTLS policies
	auth     *url.Userinfo
	from     *mail.Address
	tls      *tls.Config
}

var _ Sender = (*SMTP)(nil)

// NewSMTP returns an SMTP sender for rawURL, sending from from (net/mail's
// rules, e.g. "Tollgate <no-reply@example.com>"). rawURL is
// smtp://[user:pass@]host:port, which upgrades with STARTTLS when the
// server offers it (?starttls=require insists, ?starttls=off never tries),
// or smtps://[user:pass@]host:port, TLS from the start. A user means AUTH
// PLAIN, which is refused (ErrInsecure) without TLS unless the host is
// loopback. The errors never show the password.
func NewSMTP(rawURL, from string) (*SMTP, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the whole URL, password included.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("smtp url: %v", err)
	}
	s := &SMTP{host: u.Hostname(), auth: u.User}
	switch u.Scheme {
	case "smtp":
	case "smtps":
		s.implicit = true
	default:
		return nil, fmt.Errorf("smtp url: scheme %q: want smtp or smtps", u.Scheme)
	}
	if s.host == "" || u.Port() == "" {
		return nil, errors.New("smtp url: want host:port")
	}
	if (u.Path != "" && u.Path != "/") || u.Fragment != "" || u.Opaque != "" {
		return nil, errors.New("smtp url: want no path")
	}
	s.addr = net.JoinHostPort(s.host, u.Port())
	if err := s.readQuery(u.Query()); err != nil {
		return nil, err
	}
	if s.auth != nil && !s.implicit && s.startTLS == startTLSOff && !isLoopback(s.host) {
		return nil, fmt.Errorf("smtp url: a user with starttls=off to %s: %w", s.host, ErrInsecure)
	}
	if s.from, err = ParseFrom(from); err != nil {
		return nil, fmt.Errorf("from %q: %v", from, err)
	}
	s.tls = &tls.Config{ServerName: s.host, MinVersion: tls.VersionTLS12}
	return s, nil
}

// readQuery reads ?starttls=; any other parameter is an error, so that a
// misspelt one is not silently ignored.
func (s *SMTP) readQuery(q url.Values) error {
	for k, v := range q {
		if k != "starttls" || len(v) != 1 {
			return fmt.Errorf("smtp url: parameter %q: want only starttls=require or starttls=off", k)
		}
	}
	switch s.startTLS = q.Get("starttls"); s.startTLS {
	case startTLSOpportunistic, startTLSRequire, startTLSOff:
	default:
		return fmt.Errorf("smtp url: starttls=%q: want require or off", s.startTLS)
	}
	if s.implicit && s.startTLS != startTLSOpportunistic {
		return errors.New("smtp url: starttls is for smtp://; smtps:// is TLS throughout")
	}
	return nil
}

// isLoopback reports whether host is this machine: localhost or a loopback
// IP.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Send delivers m within Timeout (or ctx's deadline, when sooner); it
// returns ErrInvalid for a message it refuses to write, ErrInsecure when
// the server offers no TLS to protect the credentials, and otherwise the
// SMTP or network error, wrapped with ctx's error when ctx ended first.
func (s *SMTP) Send(ctx context.Context, m Message) error {
	c, err := check(m)
	if err != nil {
		return err
	}
	msg, err := format(s.from, c, time.Now())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	if err := s.send(ctx, c.to.Address, msg); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The connection's deadline is ctx's: the context ends with
			// it, a moment later at most, and says why.
			<-ctx.Done()
		}
		if ctx.Err() != nil {
			return fmt.Errorf("smtp %s: %w (%w)", s.addr, err, context.Cause(ctx))
		}
		return fmt.Errorf("smtp %s: %w", s.addr, err)
	}
	return nil
}

// send runs one SMTP session on a connection whose deadline is ctx's, and
// which ctx's end cuts short.
func (s *SMTP) send(ctx context.Context, rcpt string, msg []byte) error {
	conn, err := s.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(d); err != nil {
			return err
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c, err := smtp.NewClient(conn, s.host)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := s.secure(c); err != nil {
		return err
	}
	if err := c.Mail(s.from.Address); err != nil {
		return fmt.Errorf("mail from: %w", err)
	}
	if err := c.Rcpt(rcpt); err != nil {
		return fmt.Errorf("rcpt to: %w", err)
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	if _, err := w.Write(msg); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	return c.Quit()
}

// dial connects, with TLS from the start for smtps://.
func (s *SMTP) dial(ctx context.Context) (net.Conn, error) {
	d := &net.Dialer{Timeout: Timeout}
	if s.implicit {
		return (&tls.Dialer{NetDialer: d, Config: s.tls}).DialContext(ctx, "tcp", s.addr)
	}
	return d.DialContext(ctx, "tcp", s.addr)
}

// secure upgrades the session with STARTTLS as the URL says, then
// authenticates when the URL names a user, never in clear text to a
// host that is not loopback.
func (s *SMTP) secure(c *smtp.Client) error {
	encrypted := s.implicit
	if !s.implicit && s.startTLS != startTLSOff {
		if ok, _ := c.Extension("STARTTLS"); ok {
			if err := c.StartTLS(s.tls); err != nil {
				return fmt.Errorf("starttls: %w", err)
			}
			encrypted = true
		} else if s.startTLS == startTLSRequire {
			return errors.New("starttls=require: the server does not offer STARTTLS")
		}
	}
	if s.auth == nil {
		return nil
	}
	if !encrypted && !isLoopback(s.host) {
		return fmt.Errorf("the server offers no STARTTLS: %w", ErrInsecure)
	}
	pass, _ := s.auth.Password()
	if err := c.Auth(plainAuth{user: s.auth.Username(), pass: pass}); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	return nil
}

// plainAuth is AUTH PLAIN (RFC 4616). secure has already decided that the
// credentials may go; net/smtp's PlainAuth would repeat that decision with
// a narrower idea of loopback (localhost, 127.0.0.1 and ::1 only).
type plainAuth struct{ user, pass string }

func (a plainAuth) Start(*smtp.ServerInfo) (string, []byte, error) {
	return "PLAIN", []byte("\x00" + a.user + "\x00" + a.pass), nil
}

func (a plainAuth) Next(_ []byte, more bool) ([]byte, error) {
	if more {
		return nil, errors.New("unexpected server challenge")
	}
	return nil, nil
}
