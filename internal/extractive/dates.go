package extractive

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// A message may open with its time, as a chat export writes a session's
// first turn: "(1:56 pm on 8 May, 2023) ...".
var reStamp = regexp.MustCompile(`^\s*\((?:(\d{1,2}:\d{2})\s*([ap]m)\s+on\s+)?(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\)\s*`)

// stamp cuts a leading time stamp from text and returns its date.
func stamp(text string) (time.Time, string, bool) {
	m := reStamp.FindStringSubmatchIndex(text)
	if m == nil {
		return time.Time{}, text, false
	}
	day, _ := strconv.Atoi(text[m[6]:m[7]])
	mon, ok := months[strings.ToLower(text[m[8]:m[9]])]
	year, _ := strconv.Atoi(text[m[10]:m[11]])
	if !ok || day < 1 || day > 31 {
		return time.Time{}, text, false
	}
	return time.Date(year, mon, day, 0, 0, 0, 0, time.UTC), text[m[1]:], true
}

var months = func() map[string]time.Month {
	m := map[string]time.Month{}
	for i := time.January; i <= time.December; i++ {
		name := strings.ToLower(i.String())
		m[name], m[name[:3]] = i, i
	}
	m["sept"] = time.September
	return m
}()

// day writes a date as "8 May 2023".
func day(t time.Time) string { return fmt.Sprintf("%d %s %d", t.Day(), t.Month(), t.Year()) }

var (
	reYesterday = regexp.MustCompile(`(?i)\byesterday\b`)
	reToday     = regexp.MustCompile(`(?i)\b(today|this morning|tonight|this evening|this afternoon)\b`)
	reTomorrow  = regexp.MustCompile(`(?i)\btomorrow\b`)
	reLastDay   = regexp.MustCompile(`(?i)\b(last|this past) (monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b`)
	reNextDay   = regexp.MustCompile(`(?i)\b(next|this coming) (monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b`)
	reLastWeek  = regexp.MustCompile(`(?i)\b(last|this past) (week|weekend)\b`)
	reNextWeek  = regexp.MustCompile(`(?i)\bnext (week|weekend)\b`)
	reLastMonth = regexp.MustCompile(`(?i)\blast month\b`)
	reNextMonth = regexp.MustCompile(`(?i)\bnext month\b`)
	reLastYear  = regexp.MustCompile(`(?i)\blast year\b`)
	reNextYear  = regexp.MustCompile(`(?i)\bnext year\b`)
	reAgo       = regexp.MustCompile(`(?i)\b(a few|few|a couple of|couple of|two|three|four|five|several|\d+) (days|weeks|months|years) ago\b`)
	reThisYear  = regexp.MustCompile(`(?i)\bthis (month|year)\b`)
)

// resolve writes a sentence's relative times as the date they mean, said
// on d: "yesterday" becomes "7 May 2023", "last Friday" "the Friday before
// 8 May 2023", "last month" "April 2023". Each kind is resolved once.
func resolve(s string, d time.Time) string {
	if d.IsZero() {
		return s
	}
	once := func(re *regexp.Regexp, f func(m string) string) {
		if loc := re.FindStringIndex(s); loc != nil {
			s = s[:loc[0]] + f(s[loc[0]:loc[1]]) + s[loc[1]:]
		}
	}
	once(reYesterday, func(string) string { return day(d.AddDate(0, 0, -1)) })
	once(reToday, func(string) string { return day(d) })
	once(reTomorrow, func(string) string { return day(d.AddDate(0, 0, 1)) })
	once(reLastDay, func(m string) string { return "the " + title(lastWord(m)) + " before " + day(d) })
	once(reNextDay, func(m string) string { return "the " + title(lastWord(m)) + " after " + day(d) })
	once(reLastWeek, func(m string) string { return "the " + strings.ToLower(lastWord(m)) + " before " + day(d) })
	once(reNextWeek, func(m string) string { return "the " + strings.ToLower(lastWord(m)) + " after " + day(d) })
	once(reLastMonth, func(string) string {
		p := d.AddDate(0, -1, 0)
		return p.Month().String() + " " + strconv.Itoa(p.Year())
	})
	once(reNextMonth, func(string) string { p := d.AddDate(0, 1, 0); return p.Month().String() + " " + strconv.Itoa(p.Year()) })
	once(reLastYear, func(string) string { return strconv.Itoa(d.Year() - 1) })
	once(reNextYear, func(string) string { return strconv.Itoa(d.Year() + 1) })
	once(reThisYear, func(m string) string {
		if strings.HasSuffix(strings.ToLower(m), "month") {
			return d.Month().String() + " " + strconv.Itoa(d.Year())
		}
		return strconv.Itoa(d.Year())
	})
	once(reAgo, func(m string) string { return strings.TrimSuffix(m, " ago") + " before " + day(d) })
	return s
}

func lastWord(s string) string { return s[strings.LastIndexByte(s, ' ')+1:] }

func title(s string) string {
	s = strings.ToLower(s)
	return strings.ToUpper(s[:1]) + s[1:]
}

// reDated is a rendered conversation bullet: "8 May 2023: ...".
var reDated = regexp.MustCompile(`^(\d{1,2} [A-Z][a-z]+ \d{4}): (.*)$`)

// dated splits a rendered bullet into its date and the rest.
func dated(b string) (time.Time, string) {
	m := reDated.FindStringSubmatch(b)
	if m == nil {
		return time.Time{}, b
	}
	t, err := time.Parse("2 January 2006", m[1])
	if err != nil {
		return time.Time{}, b
	}
	return t, m[2]
}

// reSpeakerRun finds the speaker runs of a bullet: "Caroline: ... .
// Melanie: ...", or "; Melanie: " after a clause.
var reSpeakerRun = regexp.MustCompile(`(?:^|; |[.!?…]["')]* )([A-Z][\w'-]*(?: [A-Z][\w'-]*)?): `)

// speakerRuns splits a conversation bullet into (speaker, text) runs.
func speakerRuns(s string) [][2]string {
	locs := reSpeakerRun.FindAllStringSubmatchIndex(s, -1)
	if len(locs) == 0 || locs[0][0] != 0 {
		return [][2]string{{"", s}}
	}
	var out [][2]string
	for i, l := range locs {
		end := len(s)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		text := s[l[1]:end]
		if i+1 < len(locs) && s[end] != ';' {
			text = s[l[1]:locs[i+1][2]] // the sentence's end stays with it
		}
		out = append(out, [2]string{s[l[2]:l[3]], strings.TrimSpace(text)})
	}
	return out
}
