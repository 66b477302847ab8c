// Package fault reads the errors whose words were chosen for the client
// that caused them, where the fault was found (STYLE "Text a client may
// read is chosen where the fault is found"): the domain's field errors
// (policy.FieldError, tenant.FieldError, webhooks.FieldError, …) answer
// ClientFault with the field at fault and the reason. The operators'
// dashboard and the tenants' console show them on their forms through Of.
// It imports the standard library only, so that any layer may use it.
package fault

import "errors"

// Client is an error in words for the client: the field at fault (empty
// for the request as a whole) and the reason.
type Client interface {
	error
	ClientFault() (field, reason string)
}

// Of returns the field and reason of the first Client in err's chain; ok
// is false when there is none (the error is the service's own, and the
// client sees "internal error").
func Of(err error) (field, reason string, ok bool) {
	c, ok := errors.AsType[Client](err)
	if !ok {
		return "", "", false
	}
	field, reason = c.ClientFault()
	return field, reason, true
}

// NotSaved words a client fault for a form that was not saved: "Not saved:
// limit must be at least 1." — the field first, when there is one.
func NotSaved(field, reason string) string {
	if field == "" {
		return "Not saved: " + reason + "."
	}
	return "Not saved: " + field + " " + reason + "."
}
