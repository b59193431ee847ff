package ledger

import (
	"regexp"
	"slices"
	"strings"
)

type fileOp struct {
	path, op string
}

// shellFiles reads a shell command for the files it touches: > and tee
// write a file (created, unless seen), >> and tee -a, sed -i and patch
// edit, touch creates, rm deletes, mv and cp write their target; cat,
// head, grep, python and the like read theirs. It splits on ; && || | and
// newlines, skips here-documents' bodies and knows quotes, not the whole
// shell.
func shellFiles(cmd string) []fileOp {
	var out []fileOp
	for _, seg := range splitCommands(withoutHeredocBodies(cmd)) {
		words := shellWords(seg)
		if len(words) == 0 {
			continue
		}
		var args []string
		out, args = redirections(out, words)
		verb, rest, ok := commandOf(args)
		if !ok {
			continue
		}
		out = verbFiles(out, verb, rest)
	}
	return out
}

// redirections records the files a command's redirections write
// (whatever the command), and returns its other words.
func redirections(out []fileOp, words []string) ([]fileOp, []string) {
	var args []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case w == ">" || w == ">>":
			if i+1 < len(words) {
				out = add(out, words[i+1], redirectOp(w))
				i++
			}
			continue
		case strings.HasPrefix(w, ">>") && len(w) > 2:
			out = add(out, w[2:], OpEdited)
			continue
		case strings.HasPrefix(w, ">") && len(w) > 1 && w[1] != '&':
			out = add(out, w[1:], opWritten)
			continue
		case w == "<" || w == "2>" || w == "2>&1" || w == "&>" || strings.HasPrefix(w, "2>"):
			if (w == "<" || w == "2>" || w == "&>") && i+1 < len(words) {
				i++
			}
			continue
		}
		args = append(args, w)
	}
	return out, args
}

// commandOf is the program a command's words run (past sudo, env and time;
// by its base name unless it is a path) and its arguments; ok is false
// when there is none (cd changes directory only).
func commandOf(args []string) (verb string, rest []string, ok bool) {
	if len(args) == 0 {
		return "", nil, false
	}
	verb = args[0]
	for (verb == "sudo" || verb == "env" || verb == "time" || verb == "cd") && len(args) > 1 {
		if verb == "cd" {
			return "", nil, false
		}
		args = args[1:]
		verb = args[0]
	}
	if i := strings.LastIndexByte(verb, '/'); i >= 0 && !looksLikePath(verb) {
		verb = verb[i+1:]
	}
	return verb, args[1:], true
}

// verbFiles records the files program verb reads, edits, creates or
// deletes, by what it is known to do with its arguments.
func verbFiles(out []fileOp, verb string, rest []string) []fileOp {
	switch verb {
	case "sed", "perl":
		op := OpRead
		for _, a := range rest {
			if a == "-i" || strings.HasPrefix(a, "-i") || a == "--in-place" || strings.HasPrefix(a, "-pi") {
				op = OpEdited
			}
		}
		return addAll(out, rest, op)
	case "tee":
		op := opWritten
		if slices.Contains(rest, "-a") || slices.Contains(rest, "--append") {
			op = OpEdited
		}
		return addAll(out, rest, op)
	case "touch":
		return addAll(out, rest, OpCreated)
	case "rm", "unlink":
		return addAll(out, rest, OpDeleted)
	case "mv", "cp", "ln":
		files := paths(rest)
		if len(files) >= 2 {
			for _, f := range files[:len(files)-1] {
				op := OpRead
				if verb == "mv" {
					op = OpDeleted
				}
				out = add(out, f, op)
			}
			out = add(out, files[len(files)-1], opWritten)
		}
		return out
	case "patch":
		return addAll(out, rest, OpEdited)
	case "git":
		switch {
		case len(rest) > 0 && (rest[0] == "checkout" || rest[0] == "restore"):
			return addAll(out, rest[1:], OpEdited)
		case len(rest) > 0 && rest[0] == "rm":
			return addAll(out, rest[1:], OpDeleted)
		case len(rest) > 0 && (rest[0] == "add" || rest[0] == "diff" || rest[0] == "show" || rest[0] == "log"):
			return addAll(out, rest[1:], OpRead)
		}
		return out
	case "echo", "printf", "mkdir", "ls", "find", "cd", "export", "pwd", "which", "pip", "apt-get", "apt", "npm", "yarn", "chmod", "chown", "kill", "sleep":
		return out // they name no file they read (their redirections are recorded)
	}
	for _, a := range paths(rest) {
		if namesFile(strings.Trim(a, `'"`)) {
			out = add(out, a, OpRead)
		}
	}
	if looksLikePath(verb) && strings.ContainsRune(verb, '/') {
		out = add(out, verb, OpRead) // ./script.sh
	}
	return out
}

// redirectOp is what a redirection does to its target: > writes it whole,
// >> appends.
func redirectOp(w string) string {
	if w == ">>" {
		return OpEdited
	}
	return opWritten
}

// withoutHeredocBodies is cmd without the bodies of its here-documents
// (cat <<'EOF' > f.py, the file's lines, EOF): a body is a file's text,
// not commands.
func withoutHeredocBodies(cmd string) string {
	if !strings.Contains(cmd, "<<") {
		return cmd
	}
	lines := strings.Split(cmd, "\n")
	out := lines[:0:0]
	end, dash := "", false
	for _, line := range lines {
		if end != "" {
			t := line
			if dash {
				t = strings.TrimLeft(t, "\t")
			}
			if t == end || strings.TrimSpace(t) == end {
				end = ""
			}
			continue
		}
		out = append(out, line)
		if m := reHeredocStart.FindStringSubmatch(line); m != nil {
			dash, end = m[1] == "-", m[2]
		}
	}
	return strings.Join(out, "\n")
}

// reHeredocStart finds a here-document's operator and its delimiter word
// (quoted or not) on a line; <<< is a here-string, not one.
var reHeredocStart = regexp.MustCompile(`(?:^|[^<])<<(-?)\s*['"]?([A-Za-z_][A-Za-z0-9_]*)['"]?`)

func add(out []fileOp, p, op string) []fileOp {
	p = strings.Trim(p, `'"`)
	if !looksLikePath(p) {
		return out
	}
	return append(out, fileOp{path: p, op: op})
}

func addAll(out []fileOp, args []string, op string) []fileOp {
	for _, a := range paths(args) {
		out = add(out, a, op)
	}
	return out
}

// paths keeps the arguments that are not flags.
func paths(args []string) []string {
	var out []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			continue
		}
		out = append(out, a)
	}
	return out
}

// splitCommands cuts a command line at ; && || | and newlines outside quotes.
func splitCommands(cmd string) []string {
	var out []string
	var cur strings.Builder
	quote := byte(0)
	for i := 0; i < len(cmd); i++ {
		c := cmd[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote = c
			cur.WriteByte(c)
		case c == ';' || c == '\n' || c == '|' || (c == '&' && i+1 < len(cmd) && cmd[i+1] == '&'):
			out = append(out, cur.String())
			cur.Reset()
			if (c == '&' || c == '|') && i+1 < len(cmd) && cmd[i+1] == c {
				i++
			}
		default:
			cur.WriteByte(c)
		}
	}
	return append(out, cur.String())
}

// shellWords splits a command into words, quotes removed.
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	quote := byte(0)
	in := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

// patchFiles reads the files a patch envelope (Codex's apply_patch: "***
// Begin Patch", then "*** Add File: p", "*** Update File: p", "*** Delete
// File: p", "*** Move to: p") in any of args' strings adds, edits, deletes
// or moves to.
func patchFiles(args map[string]any) []fileOp {
	var out []fileOp
	var visit func(v any)
	visit = func(v any) {
		switch v := v.(type) {
		case string:
			if strings.Contains(v, "*** Begin Patch") {
				out = append(out, envelopeFiles(v)...)
			}
		case []any:
			for _, e := range v {
				visit(e)
			}
		}
	}
	for _, v := range args {
		visit(v)
	}
	return out
}

// envelopeFiles reads one patch envelope's file headers.
func envelopeFiles(patch string) []fileOp {
	var out []fileOp
	for _, line := range strings.Split(patch, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "*** ")
		if !ok {
			continue
		}
		for prefix, op := range envelopeOps {
			if p, ok := strings.CutPrefix(rest, prefix); ok {
				out = add(out, strings.TrimSpace(p), op)
			}
		}
	}
	return out
}

// envelopeOps are a patch envelope's file headers and what each does.
var envelopeOps = map[string]string{"Add File: ": OpCreated, "Update File: ": OpEdited, "Delete File: ": OpDeleted, "Move to: ": OpCreated}
