package shardsim

import (
	"context"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConfigValidate(t *testing.T) {
	for name, c := range map[string]Config{
		"no listen":    {Instances: []string{"a"}},
		"no instances": {Listen: "127.0.0.1:0"},
		"duplicate":    {Listen: "127.0.0.1:0", Instances: []string{"a", "a"}},
		"negative":     {Listen: "127.0.0.1:0", Instances: []string{"a"}, Agents: -1},
	} {
		if _, err := Start(context.Background(), c); err == nil {
			t.Errorf("%s: started", name)
		}
	}
}

func TestStartClose(t *testing.T) {
	s, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", Instances: []string{"orun-grove"}, Agents: 50})
	if err != nil {
		t.Fatal(err)
	}
	if s.Addr() == "" || s.ID() != "shard-orun-grove" || len(s.Instances()) != 1 || s.Links() != 0 || s.Sessions() != 0 {
		t.Fatalf("state: %s %s %v", s.Addr(), s.ID(), s.Instances())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestInstanceStaysOnPlane(t *testing.T) {
	cfg := DefaultConfig()
	cfg.fill()
	cfg.HalfSizeMM = 1000
	in := newInstance("x", cfg, 1)
	for range 2000 {
		in.step()
	}
	for _, e := range in.ents {
		if e.X < -1000 || e.X > 1000 || e.Y < -1000 || e.Y > 1000 {
			t.Fatalf("entity %d left the plane: %d,%d", e.ID, e.X, e.Y)
		}
	}
	if in.seq != 2000 || len(in.snapshot(1).Entities) != cfg.Agents+cfg.Players {
		t.Fatal("snapshot size")
	}
}
