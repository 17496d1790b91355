package redistest

import "testing"

func TestStartRestart(t *testing.T) {
	s := StartServer(t)
	if err := ping(s.Addr); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	if err := ping(s.Addr); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := ping(s.Addr); err == nil {
		t.Fatal("still answering after Kill")
	}
}
