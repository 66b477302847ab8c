package mail_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/mail"
	"github.com/tollgate/tollgate/internal/testkit/mailtest"
)

const from = "Tollgate <no-reply@tollgate.test>"

func newSMTP(t *testing.T, rawURL string) *mail.SMTP {
	t.Helper()
	s, err := mail.NewSMTP(rawURL, from)
	if err != nil {
		t.Fatalf("NewSMTP(%q): %v", rawURL, err)
	}
	return s
}

// only returns the one message srv holds, read whole.
func only(t *testing.T, srv *mailtest.Server) mailtest.Message {
	t.Helper()
	list := srv.Messages(t)
	if len(list) != 1 {
		t.Fatalf("mailpit holds %d messages, want 1", len(list))
	}
	return srv.Message(t, list[0].ID)
}

func header(m mailtest.Message, k string) string {
	if v := m.Headers[k]; len(v) == 1 {
		return v[0]
	}
	return ""
}

// TestSMTPSendArrives: a message reaches a real SMTP server with the
// sender, recipient, subject and text it was given and the headers of a
// plain UTF-8 text message.
func TestSMTPSendArrives(t *testing.T) {
	srv := mailtest.Start(t)
	s := newSMTP(t, srv.SMTPURL())
	text := "Confirm your address:\nhttp://localhost:8080/confirm?t=abc123\n"
	if err := s.Send(t.Context(), mail.Message{To: "Ann <ann@example.com>", Subject: "Confirm your email", Text: text}); err != nil {
		t.Fatal(err)
	}
	m := only(t, srv)
	if m.From != "no-reply@tollgate.test" || len(m.To) != 1 || m.To[0] != "ann@example.com" || m.Subject != "Confirm your email" {
		t.Errorf("got %+v, want from no-reply@tollgate.test to ann@example.com, subject %q", m.Summary, "Confirm your email")
	}
	if got, want := strings.TrimRight(m.Text, "\r\n"), strings.TrimRight(text, "\n"); normalise(got) != want {
		t.Errorf("text %q, want %q", got, want)
	}
	for k, want := range map[string]string{
		"From":                      `"Tollgate" <no-reply@tollgate.test>`,
		"To":                        `"Ann" <ann@example.com>`,
		"Mime-Version":              "1.0",
		"Content-Type":              "text/plain; charset=utf-8",
		"Content-Transfer-Encoding": "quoted-printable",
	} {
		if got := header(m, k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	if id := header(m, "Message-Id"); !strings.HasPrefix(id, "<") || !strings.HasSuffix(id, "@tollgate.test>") {
		t.Errorf("Message-ID %q, want <…@tollgate.test>", id)
	}
	if _, err := time.Parse(time.RFC1123Z, header(m, "Date")); err != nil {
		t.Errorf("Date %q: %v", header(m, "Date"), err)
	}
}

// normalise turns CRLF into LF, as the text was given.
func normalise(s string) string { return strings.ReplaceAll(s, "\r\n", "\n") }

// TestSMTPUTF8Survives: a subject and text outside ASCII, a line longer
// than SMTP's and lines SMTP treats specially arrive as they were sent;
// the subject travels Q-encoded.
func TestSMTPUTF8Survives(t *testing.T) {
	srv := mailtest.Start(t)
	s := newSMTP(t, srv.SMTPURL())
	subject := "Bestätigen Sie Ihre E-Mail-Adresse ✓ — 確認"
	text := "Grüße aus Zürich, ½ € ✓\n.a line that starts with a dot\nFrom the start\n" + strings.Repeat("é", 700) + "\n=3D is not an escape"
	if err := s.Send(t.Context(), mail.Message{To: "björn@example.com", Subject: subject, Text: text}); err != nil {
		t.Fatal(err)
	}
	m := only(t, srv)
	if m.Subject != subject {
		t.Errorf("subject %q, want %q", m.Subject, subject)
	}
	if got := normalise(strings.TrimRight(m.Text, "\r\n")); got != text {
		t.Errorf("text %q, want %q", got, text)
	}
	if raw := header(m, "Subject"); !strings.HasPrefix(raw, "=?utf-8?q?") {
		t.Errorf("raw Subject %q, want RFC 2047 Q-encoding", raw)
	}
}

// TestSMTPRefusesHeaderInjection: a line break in To or Subject, or a To
// that is not one address, is ErrInvalid and nothing reaches the server.
func TestSMTPRefusesHeaderInjection(t *testing.T) {
	srv := mailtest.Start(t)
	s := newSMTP(t, srv.SMTPURL())
	for name, m := range invalidMessages {
		t.Run(name, func(t *testing.T) {
			if err := s.Send(t.Context(), m); !errors.Is(err, mail.ErrInvalid) {
				t.Errorf("Send: %v, want ErrInvalid", err)
			}
		})
	}
	if got := srv.Messages(t); len(got) != 0 {
		t.Errorf("mailpit holds %d messages, want none: %+v", len(got), got)
	}
}

// invalidMessages are messages every Sender refuses.
var invalidMessages = map[string]mail.Message{
	"LF in To":         {To: "ann@example.com\nBcc: eve@example.com", Subject: "s", Text: "t"},
	"CRLF in To":       {To: "ann@example.com\r\nBcc: eve@example.com", Subject: "s", Text: "t"},
	"CR in Subject":    {To: "ann@example.com", Subject: "hi\rBcc: eve@example.com", Text: "t"},
	"LF in Subject":    {To: "ann@example.com", Subject: "hi\nBcc: eve@example.com", Text: "t"},
	"two recipients":   {To: "ann@example.com, eve@example.com", Subject: "s", Text: "t"},
	"not an address":   {To: "ann", Subject: "s", Text: "t"},
	"empty recipient":  {To: "", Subject: "s", Text: "t"},
	"unclosed bracket": {To: "Ann <ann@example.com", Subject: "s", Text: "t"},
}

// TestSMTPUnreachableFails: a closed port fails at once; a server that
// accepts and never speaks fails when the context's deadline passes,
// with the deadline in the error.
func TestSMTPUnreachableFails(t *testing.T) {
	closed := freeAddr(t)
	err := newSMTP(t, "smtp://"+closed).Send(t.Context(), mail.Message{To: "ann@example.com", Subject: "s", Text: "t"})
	if err == nil {
		t.Error("Send to a closed port: nil error")
	}

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err = newSMTP(t, "smtp://"+silent.Addr().String()).Send(ctx, mail.Message{To: "ann@example.com", Subject: "s", Text: "t"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Send to a silent server: %v, want context.DeadlineExceeded", err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestSMTPAuthOnLoopback: a user in the URL authenticates with AUTH PLAIN
// to a loopback server without TLS.
func TestSMTPAuthOnLoopback(t *testing.T) {
	srv := mailtest.Start(t)
	u := "smtp://" + url.UserPassword("ann", "pa ss:w@rd").String() + "@" + srv.SMTPAddr()
	if err := newSMTP(t, u).Send(t.Context(), mail.Message{To: "bob@example.com", Subject: "s", Text: "t"}); err != nil {
		t.Fatal(err)
	}
	if m := only(t, srv); m.Username != "ann" {
		t.Errorf("mailpit saw user %q, want ann", m.Username)
	}
}

// TestSMTPRefusesCredentialsInClear: credentials never cross the network
// unencrypted. starttls=off with a user to a host that is not loopback is
// refused at once; to a server that offers no STARTTLS, reached at a
// non-loopback address, the message is not sent; starttls=require to a
// server without STARTTLS is refused too.
func TestSMTPRefusesCredentialsInClear(t *testing.T) {
	if _, err := mail.NewSMTP("smtp://ann:secret@mail.example.com:587?starttls=off", from); !errors.Is(err, mail.ErrInsecure) {
		t.Errorf("NewSMTP with a user and starttls=off: %v, want ErrInsecure", err)
	}
	srv := mailtest.Start(t)
	outside := relay(t, srv.SMTPAddr())
	err := newSMTP(t, "smtp://ann:secret@"+outside).Send(t.Context(), mail.Message{To: "bob@example.com", Subject: "s", Text: "t"})
	if !errors.Is(err, mail.ErrInsecure) {
		t.Errorf("Send with a user to %s without STARTTLS: %v, want ErrInsecure", outside, err)
	}
	err = newSMTP(t, srv.SMTPURL()+"?starttls=require").Send(t.Context(), mail.Message{To: "bob@example.com", Subject: "s", Text: "t"})
	if err == nil || !strings.Contains(err.Error(), "STARTTLS") {
		t.Errorf("Send with starttls=require to a server without it: %v, want a STARTTLS error", err)
	}
	if got := srv.Messages(t); len(got) != 0 {
		t.Errorf("mailpit holds %d messages, want none", len(got))
	}
}

// relay forwards TCP connections from a port on this machine's first
// non-loopback IPv4 address to to, so that a loopback server is reached at
// an address that is not loopback. It fails t when the machine has none.
func relay(t *testing.T, to string) string {
	t.Helper()
	ip := nonLoopbackIP(t)
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return l.Addr().String()
}

func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Fatalf("no non-loopback IPv4 address on this machine (have %v): the test reaches a server at one", addrs)
	return ""
}

// TestNewSMTPURLs: what NewSMTP accepts, and what it refuses without ever
// showing the password.
func TestNewSMTPURLs(t *testing.T) {
	t.Parallel()
	good := []string{
		"smtp://127.0.0.1:1025", "smtp://mail.example.com:587?starttls=require", "smtp://ann:secret@mail.example.com:587",
		"smtp://ann:secret@localhost:25?starttls=off", "smtps://ann:secret@mail.example.com:465", "smtp://[::1]:25?starttls=off",
	}
	for _, u := range good {
		if _, err := mail.NewSMTP(u, from); err != nil {
			t.Errorf("NewSMTP(%q): %v", u, err)
		}
	}
	bad := []string{
		"http://mail.example.com:25", "smtp://mail.example.com", "smtp://:25", "smtp://ann:hunter2@mail.example.com:x",
		"smtp://mail.example.com:25?starttls=maybe", "smtp://mail.example.com:25?tls=1", "smtps://mail.example.com:465?starttls=off",
		"smtp://mail.example.com:25/path", "mail.example.com:25", "smtp://ann:hunter2@mail.example.com:25?starttls=off",
		"smtp://ann:hunter2@%zz:25",
	}
	for _, u := range bad {
		_, err := mail.NewSMTP(u, from)
		if err == nil {
			t.Errorf("NewSMTP(%q): nil error", u)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("NewSMTP(%q): error %q shows the password", u, err)
		}
	}
	for _, f := range []string{"", "no-reply", "Tollgate <no-reply@x.test>\r\nBcc: eve@x.test", "a@x.test, b@x.test"} {
		if _, err := mail.NewSMTP("smtp://127.0.0.1:25", f); err == nil {
			t.Errorf("NewSMTP from %q: nil error", f)
		}
	}
}
