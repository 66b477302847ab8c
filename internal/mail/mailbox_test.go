package mail_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/tollgate/tollgate/internal/mail"
	"github.com/tollgate/tollgate/internal/testkit/logbuf"
)

// TestMailboxKeepsTheLast50: past MailboxSize the oldest messages go;
// Messages lists the rest newest first, each with its own id and time.
func TestMailboxKeepsTheLast50(t *testing.T) {
	t.Parallel()
	b := mail.NewMailbox(nil)
	for i := range mail.MailboxSize + 7 {
		if err := b.Send(t.Context(), mail.Message{To: "ann@example.com", Subject: fmt.Sprint(i), Text: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	got := b.Messages()
	if len(got) != mail.MailboxSize {
		t.Fatalf("kept %d, want %d", len(got), mail.MailboxSize)
	}
	ids := map[string]bool{}
	for i, m := range got {
		if want := fmt.Sprint(mail.MailboxSize + 6 - i); m.Subject != want {
			t.Errorf("message %d: subject %q, want %q", i, m.Subject, want)
		}
		if m.ID == "" || ids[m.ID] || m.At.IsZero() {
			t.Errorf("message %d: id %q (or a repeat), time %v", i, m.ID, m.At)
		}
		ids[m.ID] = true
	}
}

// TestMailboxLogs: each message is logged at INFO with its recipient,
// subject and text, so that its link can be followed from the log.
func TestMailboxLogs(t *testing.T) {
	t.Parallel()
	var buf logbuf.Buffer
	b := mail.NewMailbox(slog.New(slog.NewJSONHandler(&buf, nil)))
	m := mail.Message{To: "ann@example.com", Subject: "Confirm", Text: "open http://localhost:8080/confirm?t=abc"}
	if err := b.Send(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	log := buf.String()
	for _, want := range []string{`"level":"INFO"`, `"to":"ann@example.com"`, `"subject":"Confirm"`, `"text":"open http://localhost:8080/confirm?t=abc"`, `"mail_id":"` + b.Messages()[0].ID} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s: %s", want, log)
		}
	}
}

// TestMailboxRefusesWhatSMTPRefuses: a bad message is ErrInvalid in
// development too, and is neither kept nor logged.
func TestMailboxRefusesWhatSMTPRefuses(t *testing.T) {
	t.Parallel()
	var buf logbuf.Buffer
	b := mail.NewMailbox(slog.New(slog.NewJSONHandler(&buf, nil)))
	for name, m := range invalidMessages {
		if err := b.Send(t.Context(), m); !errors.Is(err, mail.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if n := len(b.Messages()); n != 0 || buf.String() != "" {
		t.Errorf("kept %d, logged %q; want nothing", n, buf.String())
	}
}

// TestMailboxConcurrentSends: many goroutines sending and reading at once
// lose nothing below the bound (run with -race to check the locking).
func TestMailboxConcurrentSends(t *testing.T) {
	t.Parallel()
	b := mail.NewMailbox(nil)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			_ = b.Send(t.Context(), mail.Message{To: "ann@example.com", Subject: fmt.Sprint(i), Text: "t"})
			_ = b.Messages()
		})
	}
	wg.Wait()
	if n := len(b.Messages()); n != 40 {
		t.Errorf("kept %d, want 40", n)
	}
}
