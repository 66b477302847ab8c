package mail

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"mime/quotedprintable"
	"net/mail"
	"strings"
	"time"
)

// Message is one plain-text email to one recipient. To is an address
// net/mail.ParseAddress accepts ("a@example.com" or "Ann <a@example.com>");
// Subject and Text may hold any UTF-8.
type Message struct {
	To, Subject, Text string
}

// Sender sends a Message. Send returns ErrInvalid (nothing sent) for a
// message that could not be written safely; any other error means the
// message may not have been delivered.
type Sender interface {
	Send(ctx context.Context, m Message) error
}

// ErrInvalid is a message refused before anything is sent: a To that is not
// one address, or a To or Subject with a line break in it.
var ErrInvalid = errors.New("invalid message")

// checked is a Message whose recipient has been parsed.
type checked struct {
	Message
	to *mail.Address
}

// check refuses what could smuggle headers into the message (a CR or LF in
// To or Subject) and a To that is not one address.
func check(m Message) (checked, error) {
	if strings.ContainsAny(m.To, "\r\n") {
		return checked{}, fmt.Errorf("to: a line break: %w", ErrInvalid)
	}
	if strings.ContainsAny(m.Subject, "\r\n") {
		return checked{}, fmt.Errorf("subject: a line break: %w", ErrInvalid)
	}
	to, err := mail.ParseAddress(m.To)
	if err != nil {
		return checked{}, fmt.Errorf("to %q: %v: %w", m.To, err, ErrInvalid)
	}
	return checked{Message: m, to: to}, nil
}

// format writes c as an RFC 5322 message from from, dated now: UTF-8 plain
// text, quoted-printable, the subject Q-encoded when it is not ASCII. Lines
// end in CRLF.
func format(from *mail.Address, c checked, now time.Time) ([]byte, error) {
	var b bytes.Buffer
	header := func(k, v string) { fmt.Fprintf(&b, "%s: %s\r\n", k, v) }
	header("From", from.String())
	header("To", c.to.String())
	header("Subject", mime.QEncoding.Encode("utf-8", c.Subject))
	header("Date", now.Format(time.RFC1123Z))
	header("Message-ID", messageID(from, now))
	header("MIME-Version", "1.0")
	header("Content-Type", "text/plain; charset=utf-8")
	header("Content-Transfer-Encoding", "quoted-printable")
	b.WriteString("\r\n")
	// The writer turns each line break of the text into CRLF.
	qp := quotedprintable.NewWriter(&b)
	if _, err := qp.Write([]byte(c.Text)); err != nil {
		return nil, err
	}
	if err := qp.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// messageID is a unique <…@domain> for a message from from, on the
// sender's domain as RFC 5322 advises.
func messageID(from *mail.Address, now time.Time) string {
	var r [12]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read never fails
	domain := "localhost"
	if i := strings.LastIndexByte(from.Address, '@'); i >= 0 {
		domain = from.Address[i+1:]
	}
	return fmt.Sprintf("<%d.%s@%s>", now.UnixNano(), hex.EncodeToString(r[:]), domain)
}

// ParseFrom parses a sender address such as "Tollgate <no-reply@example.com>"
// (net/mail's rules); a line break in it is refused.
func ParseFrom(s string) (*mail.Address, error) {
	if strings.ContainsAny(s, "\r\n") {
		return nil, errors.New("a line break")
	}
	return mail.ParseAddress(s)
}
