package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/callsheet/callsheet/events/internal/gen"
)

func main() {
	out := flag.String("o", "payloads_json.go", "the file to write")
	flag.Parse()
	src, err := gen.Source()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, src, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
