package mailtest_test

import (
	"net/smtp"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/testkit/mailtest"
)

// TestMailpitReceivesSMTP: a message handed to the server's SMTP port
// with the standard library's client is listed and read back whole.
func TestMailpitReceivesSMTP(t *testing.T) {
	s := mailtest.Start(t)
	if got := s.Messages(t); len(got) != 0 {
		t.Fatalf("a new server holds %d messages, want 0", len(got))
	}
	msg := "From: a@example.com\r\nTo: b@example.com\r\nSubject: hello\r\n\r\nbody line\r\n"
	if err := smtp.SendMail(s.SMTPAddr(), nil, "a@example.com", []string{"b@example.com"}, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	list := s.Messages(t)
	if len(list) != 1 {
		t.Fatalf("got %d messages, want 1", len(list))
	}
	m := s.Message(t, list[0].ID)
	if m.From != "a@example.com" || len(m.To) != 1 || m.To[0] != "b@example.com" || m.Subject != "hello" {
		t.Errorf("got %+v, want from a@, to b@, subject hello", m.Summary)
	}
	if strings.TrimSpace(m.Text) != "body line" {
		t.Errorf("text %q, want %q", m.Text, "body line")
	}
	if got := m.Headers["Subject"]; len(got) != 1 || got[0] != "hello" {
		t.Errorf("Subject header %q, want [hello]", got)
	}
	if !strings.HasPrefix(s.SMTPURL(), "smtp://127.0.0.1:") {
		t.Errorf("SMTPURL %q, want smtp://127.0.0.1:port", s.SMTPURL())
	}
}
