package edge

import (
	"fmt"
	"strconv"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/iceport"
	"github.com/oshun/egbe-edge/signalling"
	"github.com/oshun/egbe-edge/signalling/pxsfu"
)

// pxsfuTokenTTL outlives any edge process: the token is minted at start.
const pxsfuTokenTTL = 365 * 24 * time.Hour

// buildPxSFU runs --pxsfu Go SFUs in-process: each connects to this edge's
// own SFU port over loopback (the SFU role's rules apply to it exactly as
// to Epic's SFU) and answers on the shared ICE port. They are SFU, SFU2,
// ..., all subscribed to --pxsfu-streamer.
func (e *Edge) buildPxSFU(authMode string) error {
	n := e.cfg.PxSFU
	if n == 0 || e.sfuLn == nil {
		return nil
	}
	url := "ws://" + e.sfuLn.Addr().String()
	for i := range n {
		cfg := pxsfu.Default()
		cfg.URL = url
		cfg.ID = "SFU"
		if i > 0 {
			cfg.ID = "SFU" + strconv.Itoa(i+1)
		}
		cfg.Subscribe = e.cfg.PxSFUStreamer
		// Its streamer usually registers after it: look again sooner than
		// Epic's 10 s.
		cfg.RetrySubscribe = 2 * time.Second
		if authMode == signalling.AuthToken {
			tok, err := e.signer.IssueSFU(auth.SFU{SFUID: cfg.ID, Upstream: cfg.Subscribe}, pxsfuTokenTTL)
			if err != nil {
				return err
			}
			cfg.Token = tok
		}
		f, err := pxsfu.New(cfg, pxsfu.Deps{Port: e.ice, Logger: e.base, Registerer: e.reg})
		if err != nil {
			return fmt.Errorf("pxsfu %s: %w", cfg.ID, err)
		}
		e.runners = append(e.runners, f.Run)
	}
	return nil
}

// The edge's ICE port serves the Go SFU.
var _ pxsfu.ICEPort = (*iceport.Port)(nil)
