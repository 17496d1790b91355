package edge

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestExampleEdgeJSON: deploy/systemd/edge.json sets every key the config
// file accepts (a new setting must be added there too), decodes strictly,
// and with real secrets in the environment is a valid prod configuration.
func TestExampleEdgeJSON(t *testing.T) {
	const path = "../deploy/systemd/edge.json"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatal(err)
	}
	for _, k := range fileKeys() {
		if _, ok := keys[k]; !ok {
			t.Errorf("%s lacks the key %q", path, k)
		}
	}
	env := []string{"EGBE_JWT_SECRET=" + testJWTSecret, "EGBE_TURN_SECRET=" + testTURNSecret, "EGBE_LINK_TOKEN=" + testTURNSecret}
	cfg, err := Load([]string{"--config", path}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != ModeProd || len(cfg.Shards) == 0 || len(cfg.Instances) == 0 {
		t.Fatalf("the example is a prod edge with shards: %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the example does not validate: %v", err)
	}
	// The unit starts the edge with only --config.
	unit, err := os.ReadFile("../deploy/systemd/egbe-edge.service")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(unit, []byte("ExecStart=/usr/local/bin/egbe-edge --config /etc/egbe-edge/edge.json\n")) {
		t.Fatal("the unit's ExecStart is not --config /etc/egbe-edge/edge.json")
	}
}

// k8sObject is the part of a Kubernetes manifest object the test reads.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Spec       struct {
		Template struct {
			Spec struct {
				Containers []struct {
					Image   string   `yaml:"image"`
					Args    []string `yaml:"args"`
					EnvFrom []struct {
						SecretRef    *struct{ Name string } `yaml:"secretRef"`
						ConfigMapRef *struct{ Name string } `yaml:"configMapRef"`
					} `yaml:"envFrom"`
					Env []struct {
						Name      string `yaml:"name"`
						Value     string `yaml:"value"`
						ValueFrom any    `yaml:"valueFrom"`
					} `yaml:"env"`
					Ports []struct {
						Name          string `yaml:"name"`
						ContainerPort int    `yaml:"containerPort"`
						Protocol      string `yaml:"protocol"`
					} `yaml:"ports"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// TestKubernetesManifest: the shipped Deployment's flags and variables are
// the edge's own, it configures shards, the ports it opens are the ports
// the edge listens on (the player port is not the SFU's 8889), and prod
// refuses its placeholder secrets until they are replaced.
func TestKubernetesManifest(t *testing.T) {
	b, err := os.ReadFile("../deploy/kubernetes/egbe-edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]k8sObject{}
	var deploy *k8sObject
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var o k8sObject
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		objs[o.Kind+"/"+o.Metadata.Name] = o
		if o.Kind == "Deployment" {
			deploy = &o
		}
	}
	if deploy == nil || len(deploy.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("no Deployment with one container")
	}
	c := deploy.Spec.Template.Spec.Containers[0]
	known := map[string]bool{}
	for _, s := range settings {
		known[s.env] = true
	}
	var env []string
	add := func(k, v string) {
		if strings.HasPrefix(k, "EGBE_") && !known[k] {
			t.Errorf("the manifest sets %s, which is no setting", k)
		}
		env = append(env, k+"="+v)
	}
	for _, from := range c.EnvFrom {
		var o k8sObject
		var ok bool
		switch {
		case from.SecretRef != nil:
			o, ok = objs["Secret/"+from.SecretRef.Name]
		case from.ConfigMapRef != nil:
			o, ok = objs["ConfigMap/"+from.ConfigMapRef.Name]
		}
		if !ok {
			t.Fatalf("envFrom names an object the manifest does not hold: %+v", from)
		}
		for k, v := range o.StringData {
			add(k, v)
		}
		for k, v := range o.Data {
			add(k, v)
		}
	}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			v = "10.0.0.7" // status.hostIP
		}
		add(e.Name, strings.ReplaceAll(v, "$(NODE_IP)", "10.0.0.7"))
	}
	slices.Sort(env)
	cfg, err := Load(c.Args, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != ModeProd || len(cfg.Shards) == 0 || len(cfg.Instances) == 0 || cfg.LinkToken == "" {
		t.Fatalf("the manifest runs a prod edge with shards and a link token: mode %q shards %v instances %v", cfg.Mode, cfg.Shards, cfg.Instances)
	}
	for inst, sh := range cfg.Instances {
		if _, ok := cfg.Shards[sh]; !ok {
			t.Errorf("instance %s routes to shard %s, which EGBE_SHARDS does not name", inst, sh)
		}
	}
	err = cfg.Validate()
	for _, secret := range []string{"EGBE_JWT_SECRET", "EGBE_TURN_SECRET", "EGBE_LINK_TOKEN"} {
		if err == nil || !strings.Contains(err.Error(), secret+": not a random secret") {
			t.Errorf("prod accepts the manifest's placeholder %s: %v", secret, err)
		}
	}
	cfg.JWTSecret, cfg.TURNSecret, cfg.LinkToken = testJWTSecret, testTURNSecret, testTURNSecret
	if err := cfg.Validate(); err != nil {
		t.Fatalf("with real secrets the manifest's configuration is invalid: %v", err)
	}

	open := map[string]bool{}
	for _, p := range c.Ports {
		open[p.Protocol+"/"+strconv.Itoa(p.ContainerPort)] = true
	}
	for name, l := range map[string]struct{ addr, proto string }{
		"http": {cfg.HTTP, "TCP"}, "https": {cfg.HTTPS, "TCP"}, "h3": {cfg.HTTPS, "UDP"}, "ice": {cfg.ICEUDP, "UDP"},
		"streamer-ws": {cfg.StreamerWS, "TCP"}, "player-ws": {cfg.PlayerWS, "TCP"}, "admin": {cfg.Admin, "TCP"},
		"turn-udp": {cfg.TURN, "UDP"}, "turn-tcp": {cfg.TURN, "TCP"},
	} {
		if p := portOf(l.addr); !open[l.proto+"/"+strconv.Itoa(p)] {
			t.Errorf("%s listens on %s/%d, which the container does not declare", name, l.proto, p)
		}
	}
	if portOf(cfg.PlayerWS) == 8889 {
		t.Error("the player port is 8889, the Pixel Streaming SFU's port (--sfu-ws)")
	}
	if c.Image != "ghcr.io/oshun/egbe-edge:latest" {
		t.Errorf("image %q is not the one deploy/image builds", c.Image)
	}
}
