package policy

import (
	"encoding/json"
	"strconv"
	"strings"
)

// The consoles' forms (the operators' dashboard and the tenants' console)
// carry the fields of the API's JSON bodies under the same names. They are
// turned into that JSON and read by Parse and ParseOverride, so that a form
// accepts exactly what the API accepts and is refused in the same words.

// ParseForm reads an HTML form that creates or replaces the policy called
// name, as Parse reads PUT /v1/policies/{name}'s body. field returns a
// form field's value as typed, "" when absent (echo.Context's FormValue,
// url.Values' Get). The fields are Parse's members: limit and alert_after
// (a number, else the text typed, for Parse to refuse in its own words),
// window ("none", a concurrency policy's, is left out), algorithm, scope,
// fail_mode, unit and on_expiry; an empty field is left out, so Parse's
// default applies; shadow is a checkbox, set when present. Errors are
// Parse's.
func ParseForm(name string, field func(string) string) (Policy, error) {
	m := map[string]any{}
	for _, f := range []string{"limit", "alert_after"} {
		if v := strings.TrimSpace(field(f)); v != "" {
			m[f] = numberOrString(v)
		}
	}
	for _, f := range []string{"window", "algorithm", "scope", "fail_mode", "unit", "on_expiry"} {
		if v := strings.TrimSpace(field(f)); v != "" {
			m[f] = v
		}
	}
	if m["window"] == "none" {
		delete(m, "window")
	}
	m["shadow"] = field("shadow") != ""
	b, _ := json.Marshal(m) // a map of strings, numbers and a bool always marshals
	return Parse(name, b)
}

// ParseOverrideForm reads an HTML form that adds or replaces the override
// of pattern, as ParseOverride reads PUT …/overrides/{pattern}'s body:
// limit as ParseForm's, and expires_at as a datetime-local input sends it
// ("2026-12-01T00:00", or with seconds), taken as UTC (as the forms say)
// and sent in RFC 3339; anything else is passed on as typed. Errors are
// ParseOverride's.
func ParseOverrideForm(pattern string, field func(string) string) (Override, error) {
	m := map[string]any{}
	if v := strings.TrimSpace(field("limit")); v != "" {
		m["limit"] = numberOrString(v)
	}
	if v := strings.TrimSpace(field("expires_at")); v != "" {
		switch len(v) {
		case len("2006-01-02T15:04"):
			v += ":00Z"
		case len("2006-01-02T15:04:05"):
			v += "Z"
		}
		m["expires_at"] = v
	}
	b, _ := json.Marshal(m) // a map of strings and numbers always marshals
	return ParseOverride(pattern, b)
}

// numberOrString is v as a JSON number when it reads as an integer, else
// the text typed.
func numberOrString(v string) any {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n
	}
	return v
}
