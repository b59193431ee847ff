package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// errHelp is returned after --help printed a command's usage.
var errHelp = errors.New("help shown")

// parseFlags parses args with fs, accepting flags before and after the
// positional arguments, and returns the positional ones. "--" ends flags.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer, synopsis string) ([]string, error) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := applyEnv(fs); err != nil {
		return nil, err
	}
	var positional []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "Usage: compactor %s\n\nFlags:\n", synopsis)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil, errHelp
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if len(args) > 0 && len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// noArgs rejects positional arguments for commands that take none.
func noArgs(args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: unexpected argument(s): %s", errUsage, strings.Join(args, " "))
	}
	return nil
}

// envName is the environment variable that sets a flag:
// COMPACTOR_<NAME>, upper case, '-' as '_'.
func envName(flagName string) string {
	return "COMPACTOR_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// applyEnv sets each flag of fs from its environment variable, when set
// and not empty (--nats-url also from NATS_URL, the NATS tools'
// variable; COMPACTOR_NATS_URL wins over it). It runs before the
// arguments are parsed, so a flag given wins, and after the config file
// set the defaults, so the environment wins over the file.
func applyEnv(fs *flag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil {
			return
		}
		name := envName(f.Name)
		v := os.Getenv(name)
		if v == "" && f.Name == "nats-url" {
			name, v = "NATS_URL", os.Getenv("NATS_URL")
		}
		if v == "" {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("%w: environment %s=%q: %v", errUsage, name, v, serr)
		}
	})
	return err
}

// byteSize is a flag of a size in bytes: a number with an optional unit
// (KB, MB, GB, TB: powers of 1024, as nats-server reads them; KiB, MiB,
// GiB, TiB likewise; B), or -1 for no limit.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(v string) error {
	s := strings.ToUpper(strings.TrimSpace(v))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TIB", 1 << 40}, {"GIB", 1 << 30}, {"MIB", 1 << 20}, {"KIB", 1 << 10}, {"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"B", 1}} {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < -1 || n == -1 && mult != 1 {
		return fmt.Errorf("%q: want a size such as 512MB or 2GB, or -1 for no limit", v)
	}
	*b = byteSize(n * mult)
	return nil
}
