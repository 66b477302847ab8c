package main

import (
	"log/slog"
	"testing"

	"github.com/tollgate/tollgate/internal/app"
	"github.com/tollgate/tollgate/internal/mail"
	"github.com/tollgate/tollgate/internal/testkit/logbuf"
	"github.com/tollgate/tollgate/internal/testkit/mailtest"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// buildApp builds the service serve would build from env, and shuts it
// down when t ends.
func buildApp(t *testing.T, env map[string]string, log *slog.Logger) *app.App {
	t.Helper()
	env["TOLLGATE_DEV"], env["TOLLGATE_COUNTER_STORE"], env["TOLLGATE_ADDR"] = "1", "memory", "127.0.0.1:0"
	cfg, err := loadConfig(envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(t.Context(), appConfig(cfg), app.Deps{DSN: pgtest.New(t), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown() })
	return a
}

// TestServeMailToTheMailbox: without TOLLGATE_SMTP_URL the service's
// Sender is the development mailbox, which keeps and logs what is sent.
func TestServeMailToTheMailbox(t *testing.T) {
	var logs logbuf.Buffer
	a := buildApp(t, map[string]string{}, slog.New(slog.NewTextHandler(&logs, nil)))
	if a.Parts.Mailbox == nil || a.Parts.Mail != mail.Sender(a.Parts.Mailbox) {
		t.Fatalf("Mail %T, Mailbox %v; want the mailbox as the Sender", a.Parts.Mail, a.Parts.Mailbox)
	}
	if err := a.Parts.Mail.Send(t.Context(), mail.Message{To: "ann@example.com", Subject: "Confirm", Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	if got := a.Parts.Mailbox.Messages(); len(got) != 1 || got[0].Subject != "Confirm" {
		t.Errorf("mailbox holds %+v, want the one message", got)
	}
}

// TestServeMailOverSMTP: with TOLLGATE_SMTP_URL the service's Sender
// hands messages to that server, from TOLLGATE_MAIL_FROM, and there is no
// mailbox.
func TestServeMailOverSMTP(t *testing.T) {
	srv := mailtest.Start(t)
	a := buildApp(t, map[string]string{"TOLLGATE_SMTP_URL": srv.SMTPURL(), "TOLLGATE_MAIL_FROM": "Ops <ops@tollgate.test>"}, nil)
	if a.Parts.Mailbox != nil {
		t.Errorf("a mailbox beside TOLLGATE_SMTP_URL")
	}
	if err := a.Parts.Mail.Send(t.Context(), mail.Message{To: "ann@example.com", Subject: "Confirm", Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	list := srv.Messages(t)
	if len(list) != 1 || list[0].From != "ops@tollgate.test" || list[0].Subject != "Confirm" {
		t.Errorf("mailpit holds %+v, want one message from ops@tollgate.test", list)
	}
}
