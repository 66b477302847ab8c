package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/policy"
)

// maxBatchBody bounds a /v1/check/batch body: 1,000 checks of a few items
// with subjects of tens of bytes fit, and 4,000 items of 200 bytes.
const maxBatchBody = 1 << 20

// checkBatch answers POST /v1/check/batch: {"checks":[…]} in,
// {"results":[…]} out, results[i] the body /v1/check answers checks[i]
// alone: its answer, or the problem of a ceiling's refusal (status 429 or
// 402 in the object). A batch that cannot be decided whole is a 400 naming
// the check and its field; a refusal of the request as a whole (before
// any check was decided) is a 429 as /v1/check's.
func (a *api) checkBatch(c echo.Context) error {
	req, held, done, err := a.open(c, "check", maxBatchBody+1)
	if done {
		return err
	}
	defer held.give()
	checks, err := parseBatch(c)
	if err != nil {
		return a.malformed(c, req, err)
	}
	bv, err := a.gate.AdmitBatch(c.Request().Context(), req, checks)
	if err != nil {
		return err
	}
	if bv.Refusal != nil {
		return a.writeRefusal(c, bv.Verdict)
	}
	bp := answerBufs.Get().(*[]byte)
	b := append((*bp)[:0], `{"results":[`...)
	// The checks a ceiling refuses in a batch are mostly refused alike
	// (the quota ran out, and every check after it meets the same
	// refusal): one equal to the last is answered with the last's bytes.
	var last *admission.Refusal
	var lastAt, lastEnd int
	for i, v := range bv.Checks {
		if i > 0 {
			b = append(b, ',')
		}
		switch {
		case v.Refusal != nil && last != nil && *v.Refusal == *last:
			b = append(b, b[lastAt:lastEnd]...)
		case v.Refusal != nil:
			p, err := json.Marshal(a.refusalProblem(v))
			if err != nil {
				return err
			}
			last, lastAt = v.Refusal, len(b)
			b = append(b, p...)
			lastEnd = len(b)
		default:
			b = appendCheckAnswer(b, v)
			b = b[:len(b)-1] // its newline
		}
	}
	b = append(b, "]}\n"...)
	err = c.JSONBlob(200, b)
	if cap(b) <= 64<<10 {
		*bp = b
		answerBufs.Put(bp)
	}
	return err
}

// parseBatch reads a /v1/check/batch body: each check is read as /v1/check
// reads its body, and a fault is named within the batch
// ("checks[3].items[0].cost").
func parseBatch(c echo.Context) ([]gate.Check, error) {
	buf := bodyBufs.Get().(*[]byte)
	defer bodyBufs.Put(buf)
	body, err := readInto(c, maxBatchBody, buf)
	if err != nil {
		return nil, err
	}
	return parseBatchBody(body)
}

// parseBatchBody decodes a /v1/check/batch body: its common shape by hand
// (decodeBatchFast), anything else, faults included, through encoding/json.
func parseBatchBody(body []byte) ([]gate.Check, error) {
	if checks, ok := decodeBatchFast(body); ok {
		return checks, nil
	}
	return parseBatchSlow(body)
}

// parseBatchSlow decodes a /v1/check/batch body through encoding/json, each
// check as parseCheckBody decodes /v1/check's; every fault names its check
// and field.
func parseBatchSlow(body []byte) ([]gate.Check, error) {
	var b struct {
		Checks []json.RawMessage `json:"checks"`
	}
	if err := unmarshalStrict(body, &b); err != nil {
		return nil, err
	}
	if b.Checks == nil {
		return nil, &badRequest{field: "checks", reason: "required: an array of checks"}
	}
	if len(b.Checks) > gate.MaxBatchChecks {
		return nil, &badRequest{field: "checks", reason: fmt.Sprintf("at most %d checks per batch", gate.MaxBatchChecks)}
	}
	checks := make([]gate.Check, len(b.Checks))
	items := 0
	for i, raw := range b.Checks {
		chk, err := parseCheckBody(raw)
		if err != nil {
			return nil, inCheck(i, err)
		}
		if chk.Mode == gate.Charge {
			// A charge is two steps (the ceilings, then the charge), which a
			// batch's one round trip cannot hold.
			return nil, &badRequest{field: fmt.Sprintf("checks[%d].mode", i), reason: `"charge" is not batched: send each charge to POST /v1/check`}
		}
		if chk.Items == nil {
			return nil, &badRequest{field: fmt.Sprintf("checks[%d].items", i), reason: "required: at least one item"}
		}
		if items += len(chk.Items); items > gate.MaxBatchItems {
			return nil, &badRequest{field: fmt.Sprintf("checks[%d].items", i), reason: fmt.Sprintf("the batch holds more than %d items in all", gate.MaxBatchItems)}
		}
		checks[i] = *chk
	}
	return checks, nil
}

// inCheck names err's field within the batch's i-th check.
func inCheck(i int, err error) error {
	var br *badRequest
	var fe *policy.FieldError
	switch {
	case errors.As(err, &br):
		field := fmt.Sprintf("checks[%d]", i)
		if br.field != "" && br.field != "body" {
			field += "." + strings.TrimPrefix(br.field, "body.")
		}
		return &badRequest{field: field, reason: br.reason}
	case errors.As(err, &fe):
		return &policy.FieldError{Field: fmt.Sprintf("checks[%d].%s", i, fe.Field), Reason: fe.Reason}
	}
	return err
}
