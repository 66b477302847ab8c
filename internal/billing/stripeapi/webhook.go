// Package stripeapi is Tollgate's adapter to Stripe and the only importer of
// stripe-go: it verifies webhook signatures and reads events into
// billing.Events (Verifier), and makes Checkout and portal sessions and usage
// records (Client, a billing.Payments and billing.Meter). No Stripe type or
// error leaves it: errors wrap billing's sentinels. Only cmd/tollgate
// imports it.
package stripeapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	stripe "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/tollgate/tollgate/internal/billing"
)

// Tolerance is how far a webhook signature's time may be from now, either
// way: Stripe's usual five minutes, which bounds how long a captured
// delivery can be replayed. stripe-go checks only the past side; a time
// further ahead (a signature made to be replayed later, or a clock far off)
// is refused too.
const Tolerance = 5 * time.Minute

// Verifier checks webhook signatures against the signing secrets and reads
// the events. It is safe for concurrent use.
type Verifier struct {
	secrets []string
	// mode is "live" or "test" when the API key says which; "" accepts
	// events of either mode.
	mode string
	// now is the clock a signature's time is compared with.
	now func() time.Time
}

// NewVerifier returns a Verifier that accepts a signature made with any of
// secrets (Stripe's whsec_… signing secrets): during a rotation both the old
// and the new one are valid. apiKey is STRIPE_API_KEY: when it names a mode
// (sk_live_, rk_live_, sk_test_, rk_test_), events of the other mode are
// refused; empty accepts both.
func NewVerifier(secrets []string, apiKey string) *Verifier {
	return &Verifier{secrets: secrets, mode: keyMode(apiKey), now: time.Now}
}

// keyMode is "live" or "test" for a secret or restricted key of that mode,
// "" otherwise.
func keyMode(key string) string {
	for _, mode := range []string{"live", "test"} {
		if strings.HasPrefix(key, "sk_"+mode+"_") || strings.HasPrefix(key, "rk_"+mode+"_") {
			return mode
		}
	}
	return ""
}

// Parse verifies that payload was signed by Stripe within Tolerance of now,
// before or after (header is the Stripe-Signature header), and returns the
// event. Events of
// any Stripe API version are accepted: only the fields Tollgate needs are
// read, and each is read defensively (an expandable field may come as an id
// or as an object). A missing, malformed, wrong or too old signature, or a
// body that is not an event, is billing.ErrBadWebhook, and so is a
// signature dated more than Tolerance ahead; so is a verified
// event whose livemode disagrees with the API key's mode. That one is a
// configuration mistake (the signing secret of the other mode's endpoint, or
// the other mode's key), refused rather than answered 200 and dropped: Stripe
// shows the failing deliveries to whoever set it up and delivers them again
// once the configuration is fixed.
func (v *Verifier) Parse(payload []byte, header string) (billing.Event, error) {
	if len(v.secrets) == 0 {
		return billing.Event{}, fmt.Errorf("verify webhook: no signing secret: %w", billing.ErrNotConfigured)
	}
	var (
		se  stripe.Event
		err error
	)
	for _, secret := range v.secrets {
		se, err = webhook.ConstructEventWithOptions(payload, header, secret, webhook.ConstructEventOptions{
			Tolerance:                Tolerance,
			IgnoreAPIVersionMismatch: true,
		})
		if !errors.Is(err, webhook.ErrNoValidSignature) {
			// Verified, or refused for a reason no other secret changes
			// (no header, a bad header, too old, not JSON).
			break
		}
	}
	switch {
	case errors.Is(err, webhook.ErrNotSigned):
		return billing.Event{}, fmt.Errorf("no Stripe-Signature header: %w", billing.ErrBadWebhook)
	case errors.Is(err, webhook.ErrInvalidHeader):
		return billing.Event{}, fmt.Errorf("malformed Stripe-Signature header: %w", billing.ErrBadWebhook)
	case errors.Is(err, webhook.ErrTooOld):
		return billing.Event{}, fmt.Errorf("signature older than %s: %w", Tolerance, billing.ErrBadWebhook)
	case errors.Is(err, webhook.ErrNoValidSignature):
		return billing.Event{}, fmt.Errorf("signature matches no signing secret: %w", billing.ErrBadWebhook)
	case err != nil:
		return billing.Event{}, fmt.Errorf("signed body is not a Stripe event: %w", billing.ErrBadWebhook)
	}
	// The signature is good, so its time is the one Stripe signed.
	if at := signedAt(header); at.After(v.now().Add(Tolerance)) {
		return billing.Event{}, fmt.Errorf("signature dated %s in the future, more than %s: %w",
			at.Sub(v.now()).Round(time.Second), Tolerance, billing.ErrBadWebhook)
	}
	if se.ID == "" || se.Type == "" || se.Created <= 0 {
		return billing.Event{}, fmt.Errorf("signed event without id, type or created: %w", billing.ErrBadWebhook)
	}
	if eventMode := map[bool]string{true: "live", false: "test"}[se.Livemode]; v.mode != "" && eventMode != v.mode {
		return billing.Event{}, fmt.Errorf("event %s is a %s-mode event but STRIPE_API_KEY is a %s-mode key: %w", se.ID, eventMode, v.mode, billing.ErrBadWebhook)
	}
	ev := billing.Event{
		ID: se.ID, Type: string(se.Type), Created: time.Unix(se.Created, 0).UTC(), Livemode: se.Livemode,
		Payload: payload,
	}
	if se.Data == nil || len(se.Data.Raw) == 0 {
		return ev, nil
	}
	if err := readObject(&ev, se.Data.Raw); err != nil {
		return billing.Event{}, fmt.Errorf("event %s: %v: %w", se.ID, err, billing.ErrBadWebhook)
	}
	return ev, nil
}

// signedAt reads the time of a Stripe-Signature header that stripe-go
// accepted ("t=1495999758,v1=…"): its last t, as stripe-go reads it.
func signedAt(header string) time.Time {
	var at time.Time
	for pair := range strings.SplitSeq(header, ",") {
		if v, ok := strings.CutPrefix(pair, "t="); ok {
			if sec, err := strconv.ParseInt(v, 10, 64); err == nil {
				at = time.Unix(sec, 0)
			}
		}
	}
	return at
}

// fields is a JSON object read one field at a time, so that a field of an
// unexpected type (a newer API version's) reads as absent instead of failing
// the whole event.
type fields map[string]json.RawMessage

// str returns the string field key, or "".
func (f fields) str(key string) string {
	var s string
	if json.Unmarshal(f[key], &s) != nil {
		return ""
	}
	return s
}

// unix returns the Unix-seconds timestamp field key, or the zero Time.
func (f fields) unix(key string) time.Time {
	var n int64
	if json.Unmarshal(f[key], &n) != nil || n <= 0 {
		return time.Time{}
	}
	return time.Unix(n, 0).UTC()
}

// ref returns the id of the expandable field key: an id, or an object with
// an id; "" otherwise.
func (f fields) ref(key string) string {
	if s := f.str(key); s != "" {
		return s
	}
	return f.obj(key).str("id")
}

// obj returns the object field key, or an empty one.
func (f fields) obj(key string) fields {
	var o fields
	if json.Unmarshal(f[key], &o) != nil {
		return fields{}
	}
	return o
}

// list returns the elements of the list object field key (its "data").
func (f fields) list(key string) []fields {
	var data []fields
	if json.Unmarshal(f.obj(key)["data"], &data) != nil {
		return nil
	}
	return data
}

// readObject fills ev's object fields from data.object.
func readObject(ev *billing.Event, raw []byte) error {
	var o fields
	if err := json.Unmarshal(raw, &o); err != nil {
		return errors.New("data.object is not a JSON object")
	}
	ev.CustomerID = o.ref("customer")
	if o.str("object") == "customer" {
		ev.CustomerID = o.str("id")
	}
	switch ev.Type {
	case billing.EventCheckoutCompleted:
		ev.Checkout = &billing.Checkout{
			SessionID: o.str("id"), Mode: o.str("mode"), ClientReferenceID: o.str("client_reference_id"),
			SubscriptionID: o.ref("subscription"),
		}
	case billing.EventSubscriptionCreated, billing.EventSubscriptionUpdated, billing.EventSubscriptionDeleted:
		s := &billing.Subscription{ID: o.str("id"), Status: o.str("status"), TenantID: o.obj("metadata").str(billing.MetadataTenantID),
			Anchor: o.unix("billing_cycle_anchor")}
		for _, it := range o.list("items") {
			bi := billing.Item{ID: it.str("id")}
			if price := it.obj("price"); len(price) > 0 {
				bi.PriceID = price.str("id")
				bi.Metered = price.obj("recurring").str("usage_type") == "metered"
			} else {
				// Subscriptions of old API versions name the price as a plan.
				plan := it.obj("plan")
				bi.PriceID = plan.str("id")
				bi.Metered = plan.str("usage_type") == "metered"
			}
			s.Items = append(s.Items, bi)
		}
		ev.Subscription = s
	case billing.EventInvoicePaid, billing.EventInvoicePaymentFailed:
		inv := &billing.Invoice{ID: o.str("id"), SubscriptionID: o.ref("subscription")}
		if inv.SubscriptionID == "" {
			// Invoices of API versions from 2025 name it under parent.
			inv.SubscriptionID = o.obj("parent").obj("subscription_details").ref("subscription")
		}
		ev.Invoice = inv
	}
	return nil
}
