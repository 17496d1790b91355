package state

import "testing"

func TestCheckRoomHolderURL(t *testing.T) {
	if err := CheckRoomHolderURL("https://edge-3.example.net:8443"); err != nil {
		t.Fatal(err)
	}
	if err := CheckRoomHolderURL("https://a b"); err == nil {
		t.Fatal("a url with a space was accepted")
	}
}
