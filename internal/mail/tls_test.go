package mail_test

import (
	"crypto/x509"
	"errors"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/mail"
	"github.com/tollgate/tollgate/internal/testkit/mailtest"
)

// TestSMTPStartTLSCarriesCredentials: to a server that offers STARTTLS,
// reached at an address that is not loopback, the session is upgraded
// and AUTH PLAIN goes over TLS; the message arrives.
func TestSMTPStartTLSCarriesCredentials(t *testing.T) {
	srv := mailtest.Start(t, mailtest.TLS(trusted.cert, trusted.key))
	outside := relay(t, srv.SMTPAddr())
	for _, q := range []string{"", "?starttls=require"} {
		if err := newSMTP(t, "smtp://ann:secret@"+outside+q).Send(t.Context(), mail.Message{To: "bob@example.com", Subject: "over tls" + q, Text: "t"}); err != nil {
			t.Fatalf("Send with starttls%s: %v", q, err)
		}
	}
	list := srv.Messages(t)
	if len(list) != 2 {
		t.Fatalf("mailpit holds %d messages, want 2", len(list))
	}
	if m := srv.Message(t, list[0].ID); m.Username != "ann" {
		t.Errorf("mailpit saw user %q, want ann", m.Username)
	}
}

// TestSMTPSImplicitTLS: smtps:// speaks TLS from the first byte.
func TestSMTPSImplicitTLS(t *testing.T) {
	srv := mailtest.Start(t, mailtest.ImplicitTLS(trusted.cert, trusted.key))
	u := strings.Replace(srv.SMTPURL(), "smtps://", "smtps://ann:secret@", 1)
	if err := newSMTP(t, u).Send(t.Context(), mail.Message{To: "bob@example.com", Subject: "smtps", Text: "t"}); err != nil {
		t.Fatal(err)
	}
	if m := only(t, srv); m.Subject != "smtps" || m.Username != "ann" {
		t.Errorf("got %+v (user %q), want subject smtps from ann", m.Summary, m.Username)
	}
}

// TestSMTPRefusesAnUntrustedCertificate: a certificate that does not
// verify ends the session, with or without credentials; the sender never
// falls back to clear text, and nothing arrives.
func TestSMTPRefusesAnUntrustedCertificate(t *testing.T) {
	srv := mailtest.Start(t, mailtest.TLS(untrusted.cert, untrusted.key))
	for _, u := range []string{srv.SMTPURL(), strings.Replace(srv.SMTPURL(), "smtp://", "smtp://ann:secret@", 1)} {
		err := newSMTP(t, u).Send(t.Context(), mail.Message{To: "bob@example.com", Subject: "s", Text: "t"})
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Errorf("Send to %s with an untrusted certificate: %v, want x509.UnknownAuthorityError", u, err)
		}
	}
	if got := srv.Messages(t); len(got) != 0 {
		t.Errorf("mailpit holds %d messages, want none", len(got))
	}
}
