package web

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// bundleRecord is pxplayer/bundle.json, written by scripts/build-player.sh.
type bundleRecord struct {
	Esbuild  lockEntry            `json:"esbuild"`
	Inputs   map[string]string    `json:"inputs"`
	Packages map[string]lockEntry `json:"packages"`
	Outputs  map[string]string    `json:"outputs"`
}

type lockEntry struct {
	Version   string `json:"version"`
	Integrity string `json:"integrity"`
}

func fileHash(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

// TestPlayerBundleMatchesLock: the committed player bundle was built from
// the committed sources with exactly the packages package-lock.json pins
// (version and integrity of every bundled package, and of esbuild), and
// the embedded files are the ones it records. After an npm update or an
// edit of pxplayer/src, this fails until scripts/build-player.sh is run.
func TestPlayerBundleMatchesLock(t *testing.T) {
	var rec bundleRecord
	readJSON(t, "pxplayer/bundle.json", &rec)
	var lock struct {
		Packages map[string]lockEntry `json:"packages"`
	}
	readJSON(t, "package-lock.json", &lock)
	const rebuild = "; run scripts/build-player.sh and commit"

	if got := lock.Packages["node_modules/esbuild"]; got != rec.Esbuild {
		t.Errorf("esbuild: lock %+v, bundle built with %+v%s", got, rec.Esbuild, rebuild)
	}
	for _, name := range []string{"node_modules/@epicgames-ps/lib-pixelstreamingfrontend-ue5.5", "node_modules/@epicgames-ps/lib-pixelstreamingfrontend-ui-ue5.5"} {
		if _, ok := rec.Packages[name]; !ok {
			t.Errorf("%s is not in the bundle", name)
		}
	}
	for name, want := range rec.Packages {
		if got, ok := lock.Packages[name]; !ok || got != want {
			t.Errorf("%s: lock %+v, bundle built with %+v%s", name, got, want, rebuild)
		}
	}
	for name, want := range rec.Inputs {
		b, err := os.ReadFile(strings.TrimPrefix(name, "./"))
		if err != nil {
			t.Fatal(err)
		}
		if got := fileHash(b); got != want {
			t.Errorf("%s changed since the bundle was built (%s, recorded %s)%s", name, got, want, rebuild)
		}
	}
	for _, name := range []string{"player.js", "THIRD_PARTY_LICENSES.txt"} {
		onDisk, err := os.ReadFile("pxplayer/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if got := fileHash(onDisk); got != rec.Outputs[name] {
			t.Errorf("pxplayer/%s is not the bundle's output (%s, recorded %s)%s", name, got, rec.Outputs[name], rebuild)
		}
		embedded, err := fs.ReadFile(Player(), name)
		if err != nil || !bytes.Equal(embedded, onDisk) {
			t.Errorf("embedded %s differs from pxplayer/%s: %v", name, name, err)
		}
	}
	lic, _ := fs.ReadFile(Player(), "THIRD_PARTY_LICENSES.txt")
	for name := range rec.Packages {
		short := strings.TrimPrefix(name, "node_modules/")
		if !bytes.Contains(lic, []byte("== "+short+"@")) {
			t.Errorf("THIRD_PARTY_LICENSES.txt has no notice for %s", short)
		}
	}
}

// TestPlayerBundleReproducible: building the bundle again from the lock
// file makes byte-identical files (the script builds twice and compares
// with what is committed). Node and web/node_modules are required.
func TestPlayerBundleReproducible(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is required (scripts/test.sh installs it): %v", err)
	}
	if _, err := os.Stat("node_modules/esbuild"); err != nil {
		t.Fatalf("web/node_modules is missing: run npm ci in web/ (scripts/test.sh does): %v", err)
	}
	out, err := exec.Command(node, "pxplayer/build.mjs", "--check").CombinedOutput()
	if err != nil {
		t.Fatalf("build-player --check: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
