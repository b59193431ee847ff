package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/compactor/compactor/contract"
)

// runContract prints the public contract (package contract's facts): as
// JSON with --json, which clients in other languages test their own copy
// against.
func runContract(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("contract", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the contract as JSON")
	pos, err := parseFlags(fs, args, stdout, "contract [--json]")
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	f := contract.Facts()
	if *asJSON {
		return printJSON(stdout, f)
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "service\t%s\n\nendpoint\tsubject\n", f.Service)
	for _, name := range sortedKeys(f.Subjects) {
		fmt.Fprintf(w, "%s\t%s\n", name, f.Subjects[name])
	}
	fmt.Fprintf(w, "\nevent type\tsubject\tpublished by\ttrigger\tschema\n")
	for _, r := range f.Routes {
		by := "the service"
		if r.Request {
			by = "runtimes"
		}
		fmt.Fprintf(w, "%s\t%s<session_id>\t%s\t%s\t%s\n", r.Type, r.Prefix, by, r.Trigger, r.Schema)
	}
	fmt.Fprintf(w, "\nstream\tsubjects\n%s\t%s\n%s\t%s\n%s\t%s\n", f.Streams["request"], f.Streams["request_subjects"],
		f.Streams["result"], f.Streams["result_subjects"], f.Streams["dlq"], f.Streams["dlq_subjects"])
	fmt.Fprintf(w, "\nsession id\t%s (%s)\nerror headers\t%s, %s\ncodes\t%v\nstatuses\t%v\n", f.SessionID.Pattern, f.SessionID.Error,
		f.Headers["error_code"], f.Headers["error"], f.Codes, f.Statuses)
	for _, name := range sortedKeys(f.Limits) {
		fmt.Fprintf(w, "%s\t%d\n", name, f.Limits[name])
	}
	return w.Flush()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
