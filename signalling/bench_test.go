package signalling

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// BenchmarkHandshake runs full player/streamer handshakes through the
// broker over real loopback sockets: connect, config, listStreamers,
// subscribe, playerConnected, a 3.8 KiB UE offer, answer, 4 ICE candidates
// each way, ping/pong, close, playerDisconnected. ns/op and allocs/op are
// per handshake and include the in-process clients' own cost.
func BenchmarkHandshake(b *testing.B) {
	for _, par := range []int{1, 8} {
		b.Run(fmt.Sprintf("pairs=%d", par), func(b *testing.B) {
			h := newHarness(b, Default(), Deps{})
			offer := ueOffer(b)
			var n atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(par) // par * GOMAXPROCS goroutines
			b.ResetTimer()
			cpu0 := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				id := "S" + strconv.FormatInt(n.Add(1), 10)
				st := benchDial(b, wsURL(h.streamer, "/"))
				defer st.Close()
				benchRead(b, st) // identify
				benchRead(b, st) // config
				benchWrite(b, st, `{"type":"endpointId","id":"`+id+`"}`)
				benchRead(b, st)
				for pb.Next() {
					benchHandshake(b, h, st, id, offer)
				}
			})
			// Process CPU (broker and clients together) per handshake.
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}

func benchHandshake(b *testing.B, h *harness, st *websocket.Conn, id string, offer []byte) {
	p := benchDial(b, wsURL(h.player, "/"))
	defer p.Close()
	benchRead(b, p) // config
	benchWrite(b, p, `{"type":"listStreamers"}`)
	benchRead(b, p)
	benchWrite(b, p, `{"type":"subscribe","streamerId":"`+id+`"}`)
	var pc struct{ PlayerID string }
	if err := json.Unmarshal(benchRead(b, st), &pc); err != nil {
		b.Fatal(err)
	}
	pid := strconv.Quote(pc.PlayerID)
	var m Message
	if err := Decode(offer, &m); err != nil {
		b.Fatal(err)
	}
	benchWrite(b, st, string(m.WithString("playerId", pc.PlayerID)))
	for i := range 4 {
		benchWrite(b, st, `{"type":"iceCandidate","playerId":`+pid+`,"candidate":{"candidate":"candidate:`+
			strconv.Itoa(i)+` 1 udp 2122260223 10.0.0.5 5000`+strconv.Itoa(i)+` typ host","sdpMid":"0","sdpMLineIndex":0}}`)
	}
	for range 5 {
		benchRead(b, p)
	}
	benchWrite(b, p, `{"type":"answer","sdp":"v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n","minBitrateBps":0,"maxBitrateBps":0}`)
	for i := range 4 {
		benchWrite(b, p, `{"type":"iceCandidate","candidate":{"candidate":"candidate:`+strconv.Itoa(i)+
			` 1 udp 2122260223 192.168.1.9 6100`+strconv.Itoa(i)+` typ host","sdpMid":"0","sdpMLineIndex":0}}`)
	}
	for range 5 {
		benchRead(b, st)
	}
	benchWrite(b, p, `{"type":"ping","time":1}`)
	benchRead(b, p)
	_ = p.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	if _, _, err := p.ReadMessage(); err == nil {
		b.Fatal("want close")
	}
	benchRead(b, st) // playerDisconnected
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchDial(b *testing.B, url string) *websocket.Conn {
	ws, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		b.Fatal(err)
	}
	return ws
}

func benchWrite(b *testing.B, ws *websocket.Conn, s string) {
	if err := ws.WriteMessage(websocket.TextMessage, []byte(s)); err != nil {
		b.Fatal(err)
	}
}

func benchRead(b *testing.B, ws *websocket.Conn) []byte {
	_, data, err := ws.ReadMessage()
	if err != nil {
		b.Fatal(err)
	}
	return data
}
