package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
)

// memoTool is a typed tool whose calls report the arguments they ran with.
type memoArgs struct {
	Path  string `json:"path"`
	Limit int    `json:"limit,omitempty" default:"100" minimum:"1" maximum:"2000"`
	Note  string `json:"note,omitempty"`
}

func newMemoTool(t testing.TB, name string) (*Tool, func() []memoArgs) {
	t.Helper()
	var mu sync.Mutex
	var ran []memoArgs
	tl, err := New(name, "Reads.", func(_ context.Context, a memoArgs) (Result, error) {
		mu.Lock()
		ran = append(ran, a)
		mu.Unlock()
		return Text("ok"), nil
	}, WithGuidelines("g"))
	if err != nil {
		t.Fatal(err)
	}
	return tl, func() []memoArgs {
		mu.Lock()
		defer mu.Unlock()
		return append([]memoArgs(nil), ran...)
	}
}

// TestRunReadsValidatedArguments: arguments planned by Arguments run from
// the memo (one lookup that finds them, no second validation), with the
// defaults and integer forms the validation prepared.
func TestRunReadsValidatedArguments(t *testing.T) {
	tl, ran := newMemoTool(t, "read")
	args, err := tl.Arguments(json.RawMessage(` "{\"path\": \"a\", \"limit\": 2.0e1, \"note\": null}" `))
	if err != nil {
		t.Fatal(err)
	}
	if string(args) != `{"limit":2.0e1,"path":"a"}` {
		t.Fatalf("Arguments=%s, want the optional null dropped", args)
	}
	if n, _ := tl.memo.len(); n != 1 {
		t.Fatalf("memo holds %d entries after planning, want 1", n)
	}
	hits := tl.memo.hits.Load()
	if _, err := tl.Run(context.Background(), args); err != nil {
		t.Fatal(err)
	}
	if got := tl.memo.hits.Load() - hits; got != 1 {
		t.Fatalf("Run looked up its arguments %d times with success, want 1", got)
	}
	if got, want := ran(), []memoArgs{{Path: "a", Limit: 20}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ran with %+v, want %+v", got, want)
	}
	// A default the validation applied reaches the run too.
	args, err = tl.Arguments(json.RawMessage(`{"path":"b"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tl.Run(context.Background(), args); err != nil {
		t.Fatal(err)
	}
	if got := ran(); got[1] != (memoArgs{Path: "b", Limit: 100}) {
		t.Fatalf("ran with %+v, want the default limit 100", got[1])
	}
	// Validating again finds them too (the shell's hooks validate before
	// planning does).
	hits = tl.memo.hits.Load()
	if _, err := tl.Arguments(json.RawMessage(`{"path":"b"}`)); err != nil || tl.memo.hits.Load() != hits+1 {
		t.Fatalf("second Arguments: err=%v, hits +%d; want nil, +1", err, tl.memo.hits.Load()-hits)
	}
}

// TestMemoNeverAdmitsUnvalidatedArguments attacks the memo as a hostile
// caller would: arguments one byte away from validated ones, a validated
// buffer rewritten in place after validation, a request that is a prefix or
// an extension of validated bytes, arguments validated by another tool of
// the same name. Each must be validated in full and refused, with the
// message the full validation gives.
func TestMemoNeverAdmitsUnvalidatedArguments(t *testing.T) {
	tl, ran := newMemoTool(t, "read")
	ctx := context.Background()
	refused := func(t *testing.T, args []byte, want string) {
		t.Helper()
		before := len(ran())
		_, err := tl.Run(ctx, args)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Run(%s): err=%v, want %q", args, err, want)
		}
		if len(ran()) != before {
			t.Fatalf("Run(%s) called the tool's function", args)
		}
		if verr := tl.Validate(args); verr == nil || verr.Error() != err.Error() {
			t.Fatalf("Validate(%s)=%v, want Run's refusal %v", args, verr, err)
		}
	}
	valid := []byte(`{"path":"a","limit":20}`)
	if err := tl.Validate(valid); err != nil {
		t.Fatal(err)
	}
	t.Run("one byte away", func(t *testing.T) {
		refused(t, []byte(`{"path":"a","limit":0}`), "arguments.limit: want at least 1, got 0")
		refused(t, []byte(`{"path":"a","lim1t":20}`), "arguments.lim1t: unknown field")
		refused(t, []byte(`{"path":"a","limit":"0"}`), "want integer, got string")
	})
	t.Run("buffer rewritten after validation", func(t *testing.T) {
		buf := []byte(`{"path":"a","limit":30}`)
		if err := tl.Validate(buf); err != nil {
			t.Fatal(err)
		}
		copy(buf, `{"path":"a","limit":-3}`)
		refused(t, buf, "want at least 1, got -3")
		args, err := tl.Arguments(json.RawMessage(`{"path":"a","limit":31}`))
		if err != nil {
			t.Fatal(err)
		}
		copy(args, `{"path":"a","limit":-4}`)
		refused(t, args, "want at least 1, got -4")
	})
	t.Run("prefix and extension", func(t *testing.T) {
		refused(t, valid[:len(valid)-1], "unexpected end")
		refused(t, append(append([]byte(nil), valid...), `{"x":1}`...), "after top-level value")
		refused(t, []byte(`{"path":"a","limit":20,"x":1}`), "arguments.x: unknown field")
	})
	t.Run("another tool of the same name", func(t *testing.T) {
		type strict struct {
			Path  string `json:"path"`
			Limit int    `json:"limit,omitempty" maximum:"10"`
		}
		other, err := New("read", "Reads less.", func(context.Context, strict) (Result, error) { return Text("ran"), nil }, WithGuidelines("g"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Run(ctx, valid); err == nil || !strings.Contains(err.Error(), "want at most 10, got 20") {
			t.Fatalf("the other tool ran arguments only the first validated: err=%v", err)
		}
	})
	t.Run("refusals are not remembered", func(t *testing.T) {
		bad := []byte(`{"path":"a","limit":0}`)
		for range 3 {
			refused(t, bad, "want at least 1, got 0")
		}
		if _, ok := tl.memo.get(bad); ok {
			t.Fatal("the memo holds refused arguments")
		}
	})
	// The arguments that did validate still run, as validated.
	if _, err := tl.Run(ctx, valid); err != nil {
		t.Fatal(err)
	}
}

// TestMemoBounded: a flood of distinct valid arguments, as a hostile model
// could send, never grows the memo beyond its bounds; arguments too large to
// keep are not kept; arguments it has forgotten are validated in full and
// still run as they should.
func TestMemoBounded(t *testing.T) {
	tl, ran := newMemoTool(t, "read")
	ctx := context.Background()
	first := []byte(`{"path":"p0"}`)
	for i := range 3 * memoMaxEntries {
		args := []byte(fmt.Sprintf(`{"path":"p%d","note":%q}`, i, strings.Repeat("n", i%300)))
		if i == 0 {
			args = first
		}
		if err := tl.Validate(args); err != nil {
			t.Fatal(err)
		}
		n, size := tl.memo.len()
		if n > memoMaxEntries || size > memoMaxBytes {
			t.Fatalf("after %d arguments the memo holds %d entries, %d bytes; bounds %d, %d", i+1, n, size, memoMaxEntries, memoMaxBytes)
		}
	}
	if _, ok := tl.memo.get(first); ok {
		t.Fatal("the first arguments are still held after the flood")
	}
	n, _ := tl.memo.len()
	large := []byte(`{"path":"big","note":"` + strings.Repeat("x", memoMaxEntryBytes) + `"}`)
	if _, err := tl.Arguments(large); err != nil {
		t.Fatal(err)
	}
	if n2, _ := tl.memo.len(); n2 != n {
		t.Fatalf("arguments of %d bytes were kept (%d entries, was %d)", len(large), n2, n)
	}
	if _, ok := tl.memo.get(large); ok {
		t.Fatal("arguments beyond memoMaxEntryBytes are held")
	}
	for _, args := range [][]byte{first, large} {
		if _, err := tl.Run(ctx, args); err != nil {
			t.Fatalf("Run of forgotten or unkept arguments: %v", err)
		}
	}
	got := ran()
	if got[0] != (memoArgs{Path: "p0", Limit: 100}) || got[1].Path != "big" || got[1].Limit != 100 {
		t.Fatalf("ran with %+v, want p0 and big, both with limit 100", got)
	}
}

// TestMemoConcurrent: planning and running from many goroutines at once,
// with arguments shared and not, and a memo kept small by eviction, run
// every call with its own arguments, whether the memo still held them or not
// (go test -race checks the rest).
func TestMemoConcurrent(t *testing.T) {
	var wrong atomic.Int64
	tl, err := New("read", "Reads.", func(_ context.Context, a memoArgs) (Result, error) {
		if a.Path != fmt.Sprintf("p%d", a.Limit) {
			wrong.Add(1)
		}
		return Text("ok"), nil
	}, WithGuidelines("g"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 400 {
				limit := 1 + (g*400+i)%2000
				if i%3 == 0 {
					limit = 7 // shared by every goroutine
				}
				raw := fmt.Sprintf(`{"path":"p%d","limit":%d}`, limit, limit)
				args, err := tl.Arguments(json.RawMessage(raw))
				if err != nil {
					errs <- err
					return
				}
				if _, err := tl.Run(context.Background(), args); err != nil {
					errs <- err
					return
				}
				if i%50 == 0 {
					if _, err := tl.Run(context.Background(), json.RawMessage(`{"path":"p0","limit":0}`)); err == nil {
						errs <- fmt.Errorf("invalid arguments ran")
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := wrong.Load(); n > 0 {
		t.Fatalf("%d calls ran with another call's arguments", n)
	}
}

// TestMemoThroughTheEventLog: a request's arguments reach the tool as
// encoding/json writes them into an event, which escapes <, >, &, U+2028
// and U+2029; arguments holding them are found all the same.
func TestMemoThroughTheEventLog(t *testing.T) {
	tl, ran := newMemoTool(t, "read")
	args, err := tl.Arguments(json.RawMessage(`{"path":"a<b>&c\u2028d` + "\u2029" + `"}`))
	if err != nil {
		t.Fatal(err)
	}
	type request struct {
		Arguments json.RawMessage `json:"arguments"`
	}
	enc, err := json.Marshal(request{Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	var back request
	if err := json.Unmarshal(enc, &back); err != nil {
		t.Fatal(err)
	}
	if string(back.Arguments) == string(args) {
		t.Fatalf("the encoding left %s as it was; the test needs arguments it escapes", args)
	}
	hits := tl.memo.hits.Load()
	if _, err := tl.Run(context.Background(), back.Arguments); err != nil {
		t.Fatal(err)
	}
	if tl.memo.hits.Load() != hits+1 {
		t.Fatalf("Run of %s (the log's form of %s) missed the memo", back.Arguments, args)
	}
	if got := ran()[0].Path; got != "a<b>&c\u2028d\u2029" {
		t.Fatalf("ran with path %q", got)
	}
}

// FuzzTypedAsBefore holds a typed tool to the decoder it had before the
// memo, the one-pass parser and the reflection-free encoder: the token
// decoder, the schema's full validation, json.Marshal.
// For any arguments, Validate refuses with the same message or accepts, and
// Run then calls the function with the same decoded value (from the memo,
// which Validate filled).
func FuzzTypedAsBefore(f *testing.F) {
	for _, s := range append(append([]string{}, argumentSeeds...), fastParseSeeds...) {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"name":"x","inner":{"height":2.0e0},"items":[1e1],"any":{"b":[1,"<&>"],"a":null}}`))
	f.Add([]byte(`{"name":"x\u003c","env":{"k":"v","a":"\ud800"}}`))
	s, err := jsonschema.For[fuzzArgs](nil)
	if err != nil {
		f.Fatal(err)
	}
	if err := applyTags(s, reflect.TypeFor[fuzzArgs]()); err != nil {
		f.Fatal(err)
	}
	schemaJSON, err := json.Marshal(s)
	if err != nil {
		f.Fatal(err)
	}
	ref, err := compileSchema(schemaJSON)
	if err != nil {
		f.Fatal(err)
	}
	before := func(raw json.RawMessage) (fuzzArgs, error) {
		var a fuzzArgs
		data := []byte(strings.TrimSpace(string(raw)))
		var obj map[string]any
		if len(data) == 0 || string(data) == "null" {
			obj = map[string]any{}
		} else if _, obj, err = parseArgumentsStd(data); err != nil {
			return a, err
		}
		if ae := ref.check(obj); ae != nil {
			return a, ae
		}
		applyDefaults(s, obj)
		integerForms(obj)
		b, err := json.Marshal(obj)
		if err != nil {
			return a, argError("arguments", "cannot re-encode: %v", err)
		}
		return a, decodeStrict(b, &a)
	}
	var mu sync.Mutex
	var last fuzzArgs
	tl, err := New("fuzz", "Fuzz target.", func(_ context.Context, a fuzzArgs) (Result, error) {
		mu.Lock()
		last = a
		mu.Unlock()
		return Result{}, nil
	}, WithGuidelines("Never."))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		want, werr := before(raw)
		for _, step := range []string{"validate", "run", "run again"} {
			var err error
			if step == "validate" {
				err = tl.Validate(raw)
			} else {
				_, err = tl.Run(context.Background(), raw)
			}
			if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
				t.Fatalf("%s %q: err=%v, before %v", step, raw, err, werr)
			}
			if err != nil || step == "validate" {
				continue
			}
			mu.Lock()
			got := last
			mu.Unlock()
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s %q: ran with %+v, before %+v", step, raw, got, want)
			}
		}
	})
}
