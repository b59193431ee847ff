package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/models"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/internal/tokens"
)

// chromium is the path of a headless-capable Chromium (Debian's chromium
// package; CHROMIUM names another), or the test is skipped.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium on this machine: install Debian's chromium package (apt-get install chromium), or set CHROMIUM, to run the inspector's browser test")
	return ""
}

// TestInspectorInChromium runs `serve --ui` on the repository's nats.conf
// (roles on), compacts a session, and checks the page as an operator sees
// it: a sign-in only an operator passes, then the session list and the
// session's page in headless Chromium, asserted on the DOM against the
// stored history, on a desktop and a phone's viewport, with screenshots
// in the test's artifact directory (go test -artifacts keeps them).
func TestInspectorInChromium(t *testing.T) {
	if code, _, stderr := runCLI(t, "serve", "--ui", "--metrics-addr", ""); code != 2 || !strings.Contains(stderr, "--ui serves the inspector page on the metrics address") {
		t.Errorf("serve --ui without a metrics address: exit %d: %s", code, stderr)
	}
	exe := chromium(t)
	as := natsConfServer(t)
	if code := cli(t, as("admin"), nil, "provision"); code != 0 {
		t.Fatal("admin could not provision")
	}
	addr := freeAddr(t)
	s := startServe(t, as("admin"), "--nats-url", as("compactor"), "--ui", "--metrics-addr", addr)
	if code := cli(t, as("admin"), nil, "session", "import", fixture, "--session-id", "tau2", "--context-limit", "6000"); code != 0 {
		t.Fatal("import failed")
	}
	if code := cli(t, as("admin"), nil, "session", "import", fixture, "--session-id", "other"); code != 0 {
		t.Fatal("import failed")
	}
	if code, _, stderr := runCLI(t, "compact", "tau2", "--nats-url", as("admin"), "--timeout", "60s"); code != 0 {
		t.Fatalf("compact: exit %d: %s", code, stderr)
	}
	// More turns, tool calls with long results, and a second compaction:
	// the page shows both side by side.
	admin := connectAs(t, as("admin"))
	var turns []map[string]any
	for i := range 6 {
		id := fmt.Sprintf("call_more_%d", i)
		turns = append(turns,
			map[string]any{"role": "assistant", "content": "", "tool_calls": []map[string]any{{"id": id, "type": "function",
				"function": map[string]any{"name": "search_direct_flight", "arguments": fmt.Sprintf(`{"origin":"JFK","destination":"SEA","date":"2024-05-%02d"}`, 10+i)}}}},
			map[string]any{"role": "tool", "tool_call_id": id, "name": "search_direct_flight",
				"content": strings.Repeat(fmt.Sprintf(`{"flight_number":"HAT%03d","origin":"JFK","destination":"SEA","status":"available","prices":{"economy":%d}},`, i, 100+i), 40)},
			map[string]any{"role": "assistant", "content": fmt.Sprintf("Flights for May %d listed; checking the next day.", 10+i)})
	}
	body, _ := json.Marshal(map[string]any{"session_id": "tau2", "messages": turns})
	if m, err := admin.nc.Request(contract.SubjectAppend, body, 30*time.Second); err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("append: %v %v", err, m)
	}
	if code, _, stderr := runCLI(t, "compact", "tau2", "--nats-url", as("admin"), "--timeout", "60s"); code != 0 {
		t.Fatalf("second compact: exit %d: %s", code, stderr)
	}
	var hist sessions.History
	if cli(t, as("admin"), &hist, "session", "show", "tau2") != 0 || len(hist.Compactions) != 2 {
		t.Fatalf("session show: %d compactions", len(hist.Compactions))
	}
	base := "http://" + addr + "/ui/"

	// Only an operator signs in: NATS itself judges the credentials.
	status := func(user, pass string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, c := range []struct {
		user, pass string
		want       int
	}{
		{"", "", http.StatusUnauthorized},
		{"admin", "not-the-password", http.StatusUnauthorized},
		{"nobody", "x", http.StatusUnauthorized},
		{"runtime", "runtime-secret", http.StatusForbidden},
		{"observer", "observer-secret", http.StatusForbidden},
		{"compactor", "compactor-secret", http.StatusForbidden},
		{"tenant-a", "tenant-a-secret", http.StatusForbidden},
		{"admin", "admin-secret", http.StatusOK},
	} {
		if got := status(c.user, c.pass); got != c.want {
			t.Errorf("signed in as %q: %d, want %d\n%s", c.user, got, c.want, s.logs.String())
		}
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	// The browser starts on the first call, on a context without a timeout
	// (a timeout there would stop the browser); the steps run under one.
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:admin-secret"))
	if _, err := chromedp.Call(bctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": auth}}); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	defer cancel()
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, s.logs.String())
		}
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(v)
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
		if err != nil {
			t.Fatalf("count %s: %v", sel, err)
		}
		return n
	}

	run("open the list", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS(`#sessions table`)))
	title, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	if list := text(`#sessions tbody`); title != "Sessions · compactor" || count(`#sessions tr.session`) != 2 || !strings.Contains(list, "tau2") || !strings.Contains(list, "6,000") {
		t.Fatalf("the list: title %q, %d rows: %q", title, count(`#sessions tr.session`), list)
	}
	// Filter by prefix with the page's own form, then follow the link:
	// each waits for the page it loads.
	follow := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		res, err := chromedp.RunResponse(ctx, steps...)
		if err != nil || res.Status != http.StatusOK {
			t.Fatalf("%s: %v %+v\n%s", what, err, res, s.logs.String())
		}
	}
	follow("filter", chromedp.SendKeys(chromedp.CSS(`#prefix`), "tau"), chromedp.Submit(chromedp.CSS(`#prefix`)))
	if n := count(`#sessions tr.session`); n != 1 || !strings.Contains(text(`#sessions tbody`), "tau2") {
		t.Fatalf("the list filtered by tau: %d rows", n)
	}
	follow("open the session", chromedp.Click(chromedp.CSS(`#sessions tr.session a`)))
	run("the compactions", chromedp.WaitVisible(chromedp.CSS(`#compactions article.compaction`)))

	m := hist.Compactions[1].Compaction // the newest, shown first
	url, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if sid, cards := text(`#session-id`), count(`#compactions article.compaction`); !strings.HasSuffix(url, "/ui/sessions/tau2") || sid != "tau2" || cards != 2 {
		t.Fatalf("session page %s: id %q, %d compaction cards", url, sid, cards)
	}
	before, after, now := text(`article.compaction.in-force .tokens .before`), text(`article.compaction.in-force .tokens .after`), text(`#tokens-now`)
	if first := text(`#compactions article.compaction h3`); !strings.HasPrefix(first, "#2") || !strings.Contains(first, "in force") {
		t.Errorf("the first card is %q, want the newest, in force", first)
	}
	if before != number(m.TokensBefore) || after != number(m.TokensAfter) || now != number(m.TokensAfter) {
		t.Errorf("tokens on the page: %s -> %s (now %s); stored %d -> %d", before, after, now, m.TokensBefore, m.TokensAfter)
	}
	// What it summarised, counted as the model counts (the appended
	// messages store no count until a compaction reads them).
	counter, err := tokens.ForEncoding(models.Default().Lookup(hist.Record.Model).Encoding)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, msg := range hist.Messages {
		if msg.Seq >= m.FromSeq && msg.Seq <= m.ToSeq {
			msg.Tokens = 0
			sum += counter.Ensure(&msg)
		}
	}
	if summarised, want := text(`article.compaction.in-force dd.summarised`), fmt.Sprintf("seqs %d–%d: %d messages, %s tokens", m.FromSeq, m.ToSeq, m.Messages, number(sum)); !strings.Contains(summarised, want) {
		t.Errorf("summarised: %q, want %q", summarised, want)
	}
	if n := count(`article.compaction.in-force .ledger ul.bullets li`); len(m.LedgerBullets) == 0 || n != len(m.LedgerBullets) {
		t.Errorf("the page shows %d ledger bullets, the compaction has %d", n, len(m.LedgerBullets))
	}
	// Issue 42: the page lists the session's requests with their trace
	// ids, says how each compaction came, and links to the context.
	if n := count(`#requests tr.request.CompactionCompleted`); n < 2 {
		t.Errorf("the requests table shows %d completions, want the two compactions'", n)
	}
	if how := text(`article.compaction.in-force dd.how`); !strings.Contains(how, "triggered by") || !strings.Contains(how, "took") {
		t.Errorf("the in-force card says how it came: %q", how)
	}
	desk := pageShot(t, ctx, "inspector-session-desktop.png")
	follow("the context", chromedp.Click(chromedp.CSS(`#context-link`)))
	run("the context page", chromedp.WaitVisible(chromedp.CSS(`ol.context`)))
	if n, shown := count(`ol.context li.message`), text(`#context-tokens`); n < 2 || !strings.Contains(shown, number(m.TokensAfter)) {
		t.Errorf("the context page: %d messages, %q (the compaction left %d tokens)", n, shown, m.TokensAfter)
	}
	// A request is found by its id from the list.
	follow("back to the list", chromedp.Navigate(base))
	follow("find the request", chromedp.SendKeys(chromedp.CSS(`#q`), m.RequestID), chromedp.Submit(chromedp.CSS(`#q`)))
	if found, err := chromedp.Run(ctx, chromedp.Location()); err != nil || !strings.Contains(found, "/ui/sessions/tau2#r-"+m.RequestID) {
		t.Errorf("finding request %s led to %s (%v)", m.RequestID, found, err)
	}
	follow("the session again", chromedp.Navigate(base+"sessions/tau2"))
	run("the compactions again", chromedp.WaitVisible(chromedp.CSS(`#compactions article.compaction`)))

	// A phone: nothing wider than the screen but the compactions' own
	// scroller.
	run("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile),
		chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#compactions article.compaction`)))
	overflow, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`))
	if err != nil {
		t.Fatal(err)
	}
	if overflow {
		t.Error("on a 390 px wide phone the page scrolls sideways")
	}
	phone := pageShot(t, ctx, "inspector-session-phone.png")
	if phone.Dx() >= desk.Dx() {
		t.Errorf("the phone screenshot is %d px wide, the desktop's %d", phone.Dx(), desk.Dx())
	}
}

// pageShot writes the whole page as a PNG under the test's artifact
// directory and checks it is a picture of something: not one flat colour.
func pageShot(t *testing.T, ctx context.Context, name string) image.Rectangle {
	t.Helper()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(buf))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	colours := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y && len(colours) < 16; y += 7 {
		for x := b.Min.X; x < b.Max.X; x += 7 {
			r, g, bl, a := img.At(x, y).RGBA()
			colours[[4]uint32{r, g, bl, a}] = true
		}
	}
	if len(colours) < 16 {
		t.Errorf("screenshot %s holds %d colours: a blank page", name, len(colours))
	}
	path := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%dx%d)", path, b.Dx(), b.Dy())
	return b
}

// number writes n as the page does: thousands separated by commas.
func number(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
