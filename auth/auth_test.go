package auth

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func testSigner(t *testing.T, now time.Time) *Signer {
	t.Helper()
	s, err := New([]byte("0123456789abcdef0123456789abcdef"), func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAccessRoundTrip(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := testSigner(t, now)
	tok, err := s.IssueAccess(Access{Subject: "u1", Tenant: "tara-studio", Region: "gb", Roles: []string{"operator"}, Voice: VoiceSquadOnly}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.VerifyAccess(tok)
	if err != nil {
		t.Fatal(err)
	}
	if a.Subject != "u1" || a.Tenant != "tara-studio" || a.Region != "gb" || !a.HasRole("operator") || a.Voice != VoiceSquadOnly {
		t.Fatalf("claims lost: %+v", a)
	}
	if !a.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("expiry %v", a.ExpiresAt)
	}
}

func TestRejections(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := testSigner(t, now)
	other, _ := New([]byte("another-secret-another-secret-xx"), func() time.Time { return now })
	access, _ := s.IssueAccess(Access{Subject: "u1"}, time.Minute)
	forged, _ := other.IssueAccess(Access{Subject: "u1"}, time.Minute)
	expired, _ := s.IssueAccess(Access{Subject: "u1"}, -time.Minute)
	resume, _ := s.IssueResume(Resume{SessionID: "s1", ShardID: "a", Subject: "u1"}, time.Minute)
	px, _ := s.IssuePxSession(PxSession{SessionID: "p", StreamerID: "x", POP: "us-east-1", Codec: "H264"}, 0)

	cases := []struct {
		name   string
		verify func() error
		want   error
	}{
		{"forged access", func() error { _, err := s.VerifyAccess(forged); return err }, ErrInvalid},
		{"expired access", func() error { _, err := s.VerifyAccess(expired); return err }, ErrExpired},
		{"resume as access", func() error { _, err := s.VerifyAccess(resume); return err }, ErrWrongType},
		{"access as resume", func() error { _, err := s.VerifyResume(access); return err }, ErrWrongType},
		{"pxsession as access", func() error { _, err := s.VerifyAccess(px); return err }, ErrWrongAudience},
		{"garbage", func() error { _, err := s.VerifyAccess("not.a.jwt"); return err }, ErrInvalid},
		{"empty", func() error { _, err := s.VerifyAccess(""); return err }, ErrInvalid},
		{"huge", func() error { _, err := s.VerifyAccess(strings.Repeat("a", MaxTokenBytes+1)); return err }, ErrTooLarge},
		{"alg none", func() error {
			_, err := s.VerifyAccess("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJ1MSJ9.")
			return err
		}, ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.verify(); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestPxSessionTTLClamp(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := testSigner(t, now)
	for _, tc := range []struct{ in, want time.Duration }{
		{0, 120 * time.Second}, {time.Second, 30 * time.Second}, {time.Hour, 900 * time.Second}, {300 * time.Second, 300 * time.Second},
	} {
		tok, err := s.IssuePxSession(PxSession{SessionID: "p", StreamerID: "x", POP: "eu-west-1", Codec: "AV1"}, tc.in)
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.VerifyPxSession(tok)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.ExpiresAt.Sub(now); got != tc.want {
			t.Errorf("ttl %v: got %v, want %v", tc.in, got, tc.want)
		}
		if p.Scope != PxScope || p.POP != "eu-west-1" || p.Codec != "AV1" || p.StreamerID != "x" {
			t.Errorf("claims %+v", p)
		}
	}
}

func TestTicketsRoundTrip(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := testSigner(t, now)
	q, err := s.IssueQueueTicket(QueueTicket{TicketID: "t1", Subject: "u", Region: "us-east-1", Position: 42, IssuedAtMs: now.UnixMilli(), RegionWeightClass: "large", Epoch: "e1"}, QueueTicketTTL)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.VerifyQueueTicket(q)
	if err != nil || got.Position != 42 || got.Epoch != "e1" || got.Subject != "u" {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := s.VerifyAdmissionTicket(q); !errors.Is(err, ErrWrongType) {
		t.Fatalf("queue ticket accepted as admission ticket: %v", err)
	}
	st, _ := s.IssueStreamer(Streamer{StreamerID: "DefaultStreamer", POP: "us-east-1", Codecs: []string{"H264"}}, time.Hour)
	if got, err := s.VerifyStreamer(st); err != nil || got.StreamerID != "DefaultStreamer" {
		t.Fatalf("%+v %v", got, err)
	}
	sf, _ := s.IssueSFU(SFU{SFUID: "SFU", Upstream: "DefaultStreamer"}, time.Hour)
	if got, err := s.VerifySFU(sf); err != nil || got.SFUID != "SFU" || got.Upstream != "DefaultStreamer" {
		t.Fatalf("%+v %v", got, err)
	}
	// A streamer token is not an SFU token, nor the other way round.
	if _, err := s.VerifySFU(st); !errors.Is(err, ErrWrongType) {
		t.Fatalf("streamer token accepted as SFU token: %v", err)
	}
	if _, err := s.VerifyStreamer(sf); !errors.Is(err, ErrWrongType) {
		t.Fatalf("SFU token accepted as streamer token: %v", err)
	}
}
