package streamer

import "fmt"

// H.264 test pattern (ITU-T H.264 / ISO 14496-10). pion has no encoder, so
// the synthetic streamer writes its own bitstream: every frame is one IDR
// access unit of I_PCM macroblocks (section 7.3.5: mb_type 25 carries raw
// 8-bit samples, 256 luma + 2x64 chroma per macroblock), Constrained
// Baseline, CAVLC, POC type 2, deblocking off. Large per frame (384 bytes
// per macroblock) but trivially correct and decodable by any decoder.
//
// Access unit layout (Annex B byte stream):
//
//	00 00 00 01 | 67 SPS | 00 00 00 01 | 68 PPS | 00 00 00 01 | 65 IDR slice
//
// NAL header byte: forbidden_zero_bit(1)=0, nal_ref_idc(2)=3, nal_unit_type(5).
const (
	nalSPS = 0x67 // nal_ref_idc 3, type 7
	nalPPS = 0x68 // nal_ref_idc 3, type 8
	nalIDR = 0x65 // nal_ref_idc 3, type 5

	mbTypeIPCM  = 25 // I-slice mb_type for I_PCM (Table 7-11)
	sliceTypeI  = 7  // I, all slices of the picture I (Table 7-6)
	profileBase = 66 // Baseline; constraint_set0/1/2 -> Constrained Baseline
	levelIdc    = 31 // level 3.1 (profile-level-id 42e01f)
)

// H264ProfileLevelID is the SDP fmtp profile-level-id of the pattern.
const H264ProfileLevelID = "42e01f"

// PatternH264 generates the test pattern.
type PatternH264 struct {
	mbW, mbH int
	sps, pps []byte // NAL units with emulation prevention, no start code
	bw       bitWriter
}

// NewPatternH264 makes a generator for width x height pixels (multiples of
// 16, at most 1920x1088).
func NewPatternH264(width, height int) (*PatternH264, error) {
	if width <= 0 || height <= 0 || width%16 != 0 || height%16 != 0 || width > 1920 || height > 1088 {
		return nil, fmt.Errorf("streamer: pattern size %dx%d: want multiples of 16 up to 1920x1088", width, height)
	}
	p := &PatternH264{mbW: width / 16, mbH: height / 16}

	var b bitWriter
	b.u(8, profileBase)
	b.u(8, 0xE0) // constraint_set0..2 = 1, set3..5 = 0, reserved_zero_2bits
	b.u(8, levelIdc)
	b.ue(0)         // seq_parameter_set_id
	b.ue(0)         // log2_max_frame_num_minus4 -> frame_num is 4 bits
	b.ue(2)         // pic_order_cnt_type 2: output order = decode order
	b.ue(1)         // max_num_ref_frames
	b.u(1, 0)       // gaps_in_frame_num_value_allowed_flag
	b.ue(p.mbW - 1) // pic_width_in_mbs_minus1
	b.ue(p.mbH - 1) // pic_height_in_map_units_minus1
	b.u(1, 1)       // frame_mbs_only_flag
	b.u(1, 1)       // direct_8x8_inference_flag
	b.u(1, 0)       // frame_cropping_flag
	b.u(1, 0)       // vui_parameters_present_flag
	b.trailing()    // rbsp_trailing_bits
	p.sps = nal(nalSPS, b.bytes())

	b = bitWriter{}
	b.ue(0)      // pic_parameter_set_id
	b.ue(0)      // seq_parameter_set_id
	b.u(1, 0)    // entropy_coding_mode_flag: CAVLC
	b.u(1, 0)    // bottom_field_pic_order_in_frame_present_flag
	b.ue(0)      // num_slice_groups_minus1
	b.ue(0)      // num_ref_idx_l0_default_active_minus1
	b.ue(0)      // num_ref_idx_l1_default_active_minus1
	b.u(1, 0)    // weighted_pred_flag
	b.u(2, 0)    // weighted_bipred_idc
	b.se(0)      // pic_init_qp_minus26
	b.se(0)      // pic_init_qs_minus26
	b.se(0)      // chroma_qp_index_offset
	b.u(1, 1)    // deblocking_filter_control_present_flag
	b.u(1, 0)    // constrained_intra_pred_flag
	b.u(1, 0)    // redundant_pic_cnt_present_flag
	b.trailing() // rbsp_trailing_bits
	p.pps = nal(nalPPS, b.bytes())
	return p, nil
}

// Frame returns access unit n (Annex B) of the pattern: a colour gradient
// with a white bar that moves one macroblock column per frame.
func (p *PatternH264) Frame(n int) []byte {
	b := &p.bw
	b.reset()
	b.ue(0)          // first_mb_in_slice
	b.ue(sliceTypeI) // slice_type
	b.ue(0)          // pic_parameter_set_id
	b.u(4, 0)        // frame_num (IDR: 0)
	b.ue(n & 1)      // idr_pic_id: consecutive IDRs differ
	b.u(1, 0)        // dec_ref_pic_marking: no_output_of_prior_pics_flag
	b.u(1, 0)        // dec_ref_pic_marking: long_term_reference_flag
	b.se(0)          // slice_qp_delta
	b.ue(1)          // disable_deblocking_filter_idc: off
	bar := n % p.mbW
	for y := 0; y < p.mbH; y++ {
		for x := 0; x < p.mbW; x++ {
			b.ue(mbTypeIPCM)
			b.align() // pcm_alignment_zero_bit
			luma, cb, cr := byte(16+x*219/max(p.mbW-1, 1)), byte(16+y*224/max(p.mbH-1, 1)), byte(240-(n*4)%224)
			if x == bar {
				luma, cb, cr = 235, 128, 128
			}
			b.fill(luma, 256)
			b.fill(cb, 64)
			b.fill(cr, 64)
		}
	}
	b.trailing() // rbsp_slice_trailing_bits
	slice := b.bytes()
	out := make([]byte, 0, 12+len(p.sps)+len(p.pps)+len(slice)+len(slice)/64)
	for _, u := range [][]byte{p.sps, p.pps} {
		out = append(out, 0, 0, 0, 1)
		out = append(out, u...)
	}
	out = append(out, 0, 0, 0, 1)
	return appendNAL(out, nalIDR, slice)
}

func nal(header byte, rbsp []byte) []byte { return appendNAL(nil, header, rbsp) }

// appendNAL appends the header and rbsp with emulation prevention (7.4.1):
// 00 00 followed by 00..03 gets an 03 inserted.
func appendNAL(dst []byte, header byte, rbsp []byte) []byte {
	dst = append(dst, header)
	zeros := 0
	for _, c := range rbsp {
		if zeros >= 2 && c <= 3 {
			dst = append(dst, 3)
			zeros = 0
		}
		dst = append(dst, c)
		if c == 0 {
			zeros++
		} else {
			zeros = 0
		}
	}
	return dst
}

// bitWriter writes MSB-first bits, Exp-Golomb codes (9.1) and raw bytes.
type bitWriter struct {
	buf  []byte
	cur  byte
	nbit uint // bits used in cur
}

func (w *bitWriter) reset() { w.buf, w.cur, w.nbit = w.buf[:0], 0, 0 }

func (w *bitWriter) bit(v uint) {
	w.cur |= byte(v&1) << (7 - w.nbit)
	w.nbit++
	if w.nbit == 8 {
		w.buf = append(w.buf, w.cur)
		w.cur, w.nbit = 0, 0
	}
}

func (w *bitWriter) u(n int, v uint) {
	for i := n - 1; i >= 0; i-- {
		w.bit(v >> uint(i))
	}
}

// ue writes unsigned Exp-Golomb: leadingZeros zeros, then v+1 in binary.
func (w *bitWriter) ue(v int) {
	x := uint(v) + 1
	n := 0
	for t := x; t > 1; t >>= 1 {
		n++
	}
	w.u(n, 0)
	w.u(n+1, x)
}

// se writes signed Exp-Golomb (9.1.1): k>0 -> 2k-1, k<=0 -> -2k.
func (w *bitWriter) se(v int) {
	if v > 0 {
		w.ue(2*v - 1)
	} else {
		w.ue(-2 * v)
	}
}

func (w *bitWriter) align() {
	for w.nbit != 0 {
		w.bit(0)
	}
}

// fill writes n copies of c; the writer must be byte aligned.
func (w *bitWriter) fill(c byte, n int) {
	for range n {
		w.buf = append(w.buf, c)
	}
}

// trailing writes rbsp_stop_one_bit and alignment zero bits.
func (w *bitWriter) trailing() {
	w.bit(1)
	w.align()
}

func (w *bitWriter) bytes() []byte { return append([]byte(nil), w.buf...) }
