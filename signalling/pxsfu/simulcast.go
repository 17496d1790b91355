package pxsfu

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pion/sdp/v3"
)

// maxOfferBytes bounds a streamer offer (UE's are a few KiB).
const maxOfferBytes = 256 << 10

// maxLayers bounds the simulcast layers of one video section (UE sends
// three; mediasoup's bridge takes any number).
const maxLayers = 4

// offerInfo is what the SFU takes from a streamer's offer: only the first
// video and first audio sections are used (as Epic's SFU bridge does).
type offerInfo struct {
	video *mediaInfo
	audio *mediaInfo
	data  bool // an m=application section: data channels to relay
}

// mediaInfo is one media section of the offer.
type mediaInfo struct {
	mid    string
	form   string      // simulcast form: "rid", "ssrc", or "" (one layer)
	layers []layerInfo // lowest resolution first: layer i is spatial layer i
}

// layerInfo names one simulcast encoding: by rid, or by SSRC (with the
// SSRC of its RTX repair stream, if any).
type layerInfo struct {
	rid       string
	ssrc, rtx uint32
}

// Simulcast forms.
const (
	formRID  = "rid"
	formSSRC = "ssrc"
)

// parseOffer reads and checks a streamer offer. Simulcast may be given as
// RID (a=rid:<id> send, ordered by a=simulcast:send if present, else by
// the a=rid lines) or as an SSRC group (a=ssrc-group:SIM, in its order);
// either way the layers are taken lowest resolution first, as UE lists
// them. Errors wrap ErrBadOffer.
func parseOffer(raw string) (offerInfo, error) {
	var info offerInfo
	if len(raw) == 0 || len(raw) > maxOfferBytes {
		return info, fmt.Errorf("%w: %d bytes of SDP", ErrBadOffer, len(raw))
	}
	var d sdp.SessionDescription
	if err := d.UnmarshalString(raw); err != nil {
		return info, fmt.Errorf("%w: %w", ErrBadOffer, err)
	}
	for _, md := range d.MediaDescriptions {
		switch md.MediaName.Media {
		case "application":
			info.data = true
		case "video", "audio":
			if (md.MediaName.Media == "video" && info.video != nil) || (md.MediaName.Media == "audio" && info.audio != nil) {
				continue // only the first of each kind
			}
			if dir := direction(md); dir == "recvonly" || dir == "inactive" {
				continue // nothing sent to us
			}
			mi, err := parseMedia(md)
			if err != nil {
				return info, err
			}
			if md.MediaName.Media == "video" {
				info.video = mi
			} else {
				if len(mi.layers) > 1 {
					return info, fmt.Errorf("%w: simulcast audio", ErrBadOffer)
				}
				info.audio = mi
			}
		}
	}
	if info.video == nil {
		return info, fmt.Errorf("%w: no video section the streamer sends on", ErrBadOffer)
	}
	return info, nil
}

func direction(md *sdp.MediaDescription) string {
	for _, a := range md.Attributes {
		switch a.Key {
		case "sendrecv", "sendonly", "recvonly", "inactive":
			return a.Key
		}
	}
	return "sendrecv"
}

func parseMedia(md *sdp.MediaDescription) (*mediaInfo, error) {
	mi := &mediaInfo{}
	var rids []string          // a=rid ... send, in line order
	var simulcast []string     // a=simulcast:send order
	var sim []uint32           // a=ssrc-group:SIM
	fid := map[uint32]uint32{} // primary -> RTX
	ssrcs := map[uint32]bool{}
	bad := func(format string, a ...any) (*mediaInfo, error) {
		return nil, fmt.Errorf("%w: %s section: "+format, append([]any{ErrBadOffer, md.MediaName.Media}, a...)...)
	}
	for _, a := range md.Attributes {
		switch a.Key {
		case "mid":
			mi.mid = a.Value
		case "rid":
			f := strings.Fields(a.Value)
			if len(f) < 2 || !validRID(f[0]) {
				return bad("rid %q", a.Value)
			}
			if f[1] != "send" {
				return bad("rid %s is %s, want send", f[0], f[1])
			}
			for _, r := range rids {
				if r == f[0] {
					return bad("rid %s twice", f[0])
				}
			}
			rids = append(rids, f[0])
		case "simulcast":
			dir, list, ok := strings.Cut(strings.TrimSpace(a.Value), " ")
			if !ok || dir != "send" || simulcast != nil {
				return bad("simulcast %q", a.Value)
			}
			for _, alt := range strings.Split(list, ";") {
				// Alternatives ("a,b") and paused streams ("~a"): the first
				// alternative is the layer.
				r := strings.TrimPrefix(strings.Split(alt, ",")[0], "~")
				if !validRID(r) {
					return bad("simulcast %q", a.Value)
				}
				simulcast = append(simulcast, r)
			}
		case "ssrc":
			n, err := parseSSRC(strings.SplitN(a.Value, " ", 2)[0])
			if err != nil {
				return bad("ssrc %q", a.Value)
			}
			ssrcs[n] = true
		case "ssrc-group":
			f := strings.Fields(a.Value)
			if len(f) == 0 {
				return bad("ssrc-group %q", a.Value)
			}
			var group []uint32
			for _, s := range f[1:] {
				n, err := parseSSRC(s)
				if err != nil {
					return bad("ssrc-group %q", a.Value)
				}
				group = append(group, n)
			}
			switch f[0] {
			case "SIM":
				if sim != nil || len(group) < 2 {
					return bad("ssrc-group:SIM %q", a.Value)
				}
				sim = group
			case "FID":
				if len(group) != 2 {
					return bad("ssrc-group:FID %q", a.Value)
				}
				fid[group[0]] = group[1]
			}
		}
	}
	if mi.mid == "" {
		return bad("no mid")
	}
	switch {
	case len(rids) > 0:
		order := rids
		if simulcast != nil {
			if len(simulcast) != len(rids) {
				return bad("a=simulcast lists %d rids, a=rid %d", len(simulcast), len(rids))
			}
			for _, r := range simulcast {
				found := false
				for _, x := range rids {
					found = found || x == r
				}
				if !found {
					return bad("a=simulcast names rid %s with no a=rid line", r)
				}
			}
			order = simulcast
		}
		if len(order) > maxLayers {
			return bad("%d simulcast layers, at most %d", len(order), maxLayers)
		}
		mi.form = formRID
		for _, r := range order {
			mi.layers = append(mi.layers, layerInfo{rid: r})
		}
	case simulcast != nil:
		return bad("a=simulcast without a=rid lines")
	case sim != nil:
		if len(sim) > maxLayers {
			return bad("%d simulcast layers, at most %d", len(sim), maxLayers)
		}
		seen := map[uint32]bool{}
		for _, s := range sim {
			if seen[s] || !ssrcs[s] {
				return bad("ssrc-group:SIM ssrc %d repeated or without an a=ssrc line", s)
			}
			seen[s] = true
			mi.layers = append(mi.layers, layerInfo{ssrc: s, rtx: fid[s]})
		}
		mi.form = formSSRC
	default:
		mi.layers = []layerInfo{{}}
	}
	return mi, nil
}

// validRID: RFC 8851 rid-id is 1*(alpha-numeric / "-" / "_"); we also
// bound it (a header extension carries it).
func validRID(r string) bool {
	if r == "" || len(r) > 32 {
		return false
	}
	for _, c := range r {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func parseSSRC(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("ssrc %q", s)
	}
	return uint32(n), nil
}
