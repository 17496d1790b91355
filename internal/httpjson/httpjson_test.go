package httpjson

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteError(rec, http.StatusForbidden, "cross_site_request", "no")
	if rec.Code != http.StatusForbidden || rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("status %d headers %v", rec.Code, rec.Header())
	}
	var e Error
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code != "cross_site_request" || e.Message != "no" {
		t.Fatalf("body %q: %v", rec.Body.String(), err)
	}
}

// TestDecode: one known object within the bound decodes; an unknown field,
// trailing data, an over-long body and an empty one do not.
func TestDecode(t *testing.T) {
	type body struct {
		Reason string `json:"reason"`
	}
	long := `{"reason":"` + strings.Repeat("x", 64) + `"}`
	for _, c := range []struct {
		name, in string
		ok       bool
		is       error
	}{
		{name: "one object", in: `{"reason":"spam"}`, ok: true},
		{name: "unknown field", in: `{"reason":"spam","extra":1}`},
		{name: "trailing data", in: `{"reason":"a"}{"reason":"b"}`, is: ErrTrailingData},
		{name: "over the bound", in: long},
		{name: "empty", in: ``, is: io.EOF},
	} {
		t.Run(c.name, func(t *testing.T) {
			var v body
			err := Decode(httptest.NewRequest(http.MethodPost, "/", strings.NewReader(c.in)), &v, 40)
			if c.ok != (err == nil) || (c.is != nil && !errors.Is(err, c.is)) {
				t.Fatalf("Decode(%q) = %v (value %+v)", c.in, err, v)
			}
		})
	}
}
