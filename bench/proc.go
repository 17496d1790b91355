package bench

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ: /proc/<pid>/stat reports CPU time in these.
const clockTicks = 100

// ProcUsage is a process's cumulative CPU time and current RSS.
type ProcUsage struct {
	CPU      time.Duration
	RSSBytes int64
}

// ReadProc reads pid's usage from /proc.
func ReadProc(pid int) (ProcUsage, error) {
	var u ProcUsage
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// Fields after the command name, which is parenthesised and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return u, fmt.Errorf("bench: odd /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return u, fmt.Errorf("bench: short /proc/%d/stat", pid)
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	u.CPU = time.Duration(utime+stime) * time.Second / clockTicks
	st, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	defer st.Close()
	sc := bufio.NewScanner(st)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			u.RSSBytes = kb << 10
		}
	}
	return u, nil
}
