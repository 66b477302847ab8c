package mail

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
)

// MailboxSize is how many messages a Mailbox keeps; older ones are
// forgotten.
const MailboxSize = 50

// Stored is a message a Mailbox kept: its id, when it was sent, and the
// message.
type Stored struct {
	ID string
	At time.Time
	Message
}

// Mailbox is the Sender of development, when no SMTP server is configured:
// it logs each message at INFO (recipient, subject and text, so that a
// link in it can be followed from the log) and keeps the last MailboxSize
// in memory. It is safe for concurrent use.
type Mailbox struct {
	log  *slog.Logger
	now  func() time.Time
	mu   sync.Mutex
	kept []Stored // oldest first
}

var _ Sender = (*Mailbox)(nil)

// NewMailbox returns an empty Mailbox that logs to log (nil: nowhere).
func NewMailbox(log *slog.Logger) *Mailbox {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Mailbox{log: log, now: time.Now}
}

// Send keeps and logs m. It refuses what SMTP refuses (ErrInvalid), so
// that a bad message shows in development too.
func (b *Mailbox) Send(ctx context.Context, m Message) error {
	if _, err := check(m); err != nil {
		return err
	}
	s := Stored{ID: uuid.NewString(), At: b.now(), Message: m}
	b.mu.Lock()
	if len(b.kept) == MailboxSize {
		b.kept = slices.Delete(b.kept, 0, 1)
	}
	b.kept = append(b.kept, s)
	b.mu.Unlock()
	b.log.InfoContext(ctx, "mail kept in the development mailbox (TOLLGATE_SMTP_URL is unset)",
		"mail_id", s.ID, "to", m.To, "subject", m.Subject, "text", m.Text)
	return nil
}

// Messages returns the kept messages, newest first.
func (b *Mailbox) Messages() []Stored {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := slices.Clone(b.kept)
	slices.Reverse(out)
	return out
}
