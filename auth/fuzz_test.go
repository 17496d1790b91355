package auth

import (
	"errors"
	"testing"
	"time"
)

// FuzzVerify feeds arbitrary strings to every verifier: no panic, and every
// refusal is one of the package's typed errors.
func FuzzVerify(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	s, err := New([]byte("0123456789abcdef0123456789abcdef"), func() time.Time { return now })
	if err != nil {
		f.Fatal(err)
	}
	access, _ := s.IssueAccess(Access{Subject: "u1", Roles: []string{"operator"}}, time.Hour)
	resume, _ := s.IssueResume(Resume{SessionID: "s1", ShardID: "a", Subject: "u1"}, time.Minute)
	px, _ := s.IssuePxSession(PxSession{SessionID: "p", StreamerID: "x", POP: "us-east-1", Codec: "H264"}, 0)
	for _, seed := range []string{access, resume, px, "", "a.b.c", "eyJhbGciOiJub25lIn0.e30.", access[:len(access)/2]} {
		f.Add(seed)
	}
	typed := func(err error) bool {
		return err == nil || errors.Is(err, ErrInvalid) || errors.Is(err, ErrExpired) ||
			errors.Is(err, ErrWrongAudience) || errors.Is(err, ErrWrongType) || errors.Is(err, ErrTooLarge)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		if _, err := s.VerifyAccess(tok); !typed(err) {
			t.Fatalf("access: untyped error %v", err)
		}
		if _, err := s.VerifyResume(tok); !typed(err) {
			t.Fatalf("resume: untyped error %v", err)
		}
		if _, err := s.VerifyPxSession(tok); !typed(err) {
			t.Fatalf("pxsession: untyped error %v", err)
		}
		if _, err := s.VerifyStreamer(tok); !typed(err) {
			t.Fatalf("streamer: untyped error %v", err)
		}
		if _, err := s.VerifySFU(tok); !typed(err) {
			t.Fatalf("sfu: untyped error %v", err)
		}
		if _, err := s.VerifyQueueTicket(tok); !typed(err) {
			t.Fatalf("queue ticket: untyped error %v", err)
		}
		if _, err := s.VerifyAdmissionTicket(tok); !typed(err) {
			t.Fatalf("admission ticket: untyped error %v", err)
		}
	})
}
