package epicplayer

// findSPS returns the SPS NAL unit in an H.264 RTP payload (RFC 6184): a
// single NAL unit packet or an aggregate (STAP-A); nil if there is none.
func findSPS(p []byte) []byte {
	if len(p) == 0 {
		return nil
	}
	switch p[0] & 0x1f {
	case 7:
		return p
	case 24: // STAP-A: 16-bit size, NAL unit, ...
		for i := 1; i+2 < len(p); {
			n := int(p[i])<<8 | int(p[i+1])
			if n == 0 || i+2+n > len(p) {
				return nil
			}
			if p[i+2]&0x1f == 7 {
				return p[i+2 : i+2+n]
			}
			i += 2 + n
		}
	}
	return nil
}

// spsSize reads the frame size of a baseline/main-profile SPS (H.264
// 7.3.2.1.1, no frame cropping beyond what it honours): enough for the
// synthetic pattern and typical UE streams.
func spsSize(nal []byte) (w, h int, ok bool) {
	if len(nal) < 4 {
		return 0, 0, false
	}
	r := bitReader{b: unescape(nal[1:])}
	profile := r.u(8)
	r.u(16) // constraint flags, level
	r.ue()  // seq_parameter_set_id
	switch profile {
	case 100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135:
		if r.ue() == 3 { // chroma_format_idc
			r.u(1)
		}
		r.ue()           // bit_depth_luma_minus8
		r.ue()           // bit_depth_chroma_minus8
		r.u(1)           // qpprime_y_zero_transform_bypass_flag
		if r.u(1) == 1 { // seq_scaling_matrix_present_flag
			return 0, 0, false // not needed here
		}
	}
	r.ue()          // log2_max_frame_num_minus4
	switch r.ue() { // pic_order_cnt_type
	case 0:
		r.ue()
	case 1:
		r.u(1)
		r.se()
		r.se()
		for n := r.ue(); n > 0 && !r.bad; n-- {
			r.se()
		}
	}
	r.ue()                 // max_num_ref_frames
	r.u(1)                 // gaps_in_frame_num_value_allowed_flag
	mbW := r.ue() + 1      // pic_width_in_mbs_minus1
	mapH := r.ue() + 1     // pic_height_in_map_units_minus1
	frameMbsOnly := r.u(1) // frame_mbs_only_flag
	if frameMbsOnly == 0 {
		r.u(1) // mb_adaptive_frame_field_flag
	}
	r.u(1) // direct_8x8_inference_flag
	w, h = 16*mbW, 16*mapH*(2-frameMbsOnly)
	if r.u(1) == 1 { // frame_cropping_flag (4:2:0: units of 2)
		l, rt, t, b := r.ue(), r.ue(), r.ue(), r.ue()
		w -= 2 * (l + rt)
		h -= 2 * (2 - frameMbsOnly) * (t + b)
	}
	return w, h, !r.bad && w > 0 && h > 0
}

// unescape removes emulation prevention bytes (00 00 03).
func unescape(b []byte) []byte {
	out := make([]byte, 0, len(b))
	zeros := 0
	for _, c := range b {
		if zeros >= 2 && c == 3 {
			zeros = 0
			continue
		}
		out = append(out, c)
		if c == 0 {
			zeros++
		} else {
			zeros = 0
		}
	}
	return out
}

type bitReader struct {
	b   []byte
	pos int
	bad bool
}

func (r *bitReader) u(n int) int {
	v := 0
	for ; n > 0; n-- {
		if r.pos >= 8*len(r.b) {
			r.bad = true
			return 0
		}
		v = v<<1 | int(r.b[r.pos/8]>>(7-r.pos%8))&1
		r.pos++
	}
	return v
}

func (r *bitReader) ue() int {
	zeros := 0
	for r.u(1) == 0 && !r.bad {
		if zeros++; zeros > 31 {
			r.bad = true
			return 0
		}
	}
	return 1<<zeros - 1 + r.u(zeros)
}

func (r *bitReader) se() int {
	v := r.ue()
	if v%2 == 1 {
		return (v + 1) / 2
	}
	return -v / 2
}
