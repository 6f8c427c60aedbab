// Package doctest runs the shell blocks of the README and docs/ and checks
// that they print what the docs show, so a documented command that drifts
// from the code fails CI (TestDocs, which scripts/test runs on its own).
//
// The test writes the repository as a clone has it (HEAD, plus the working
// tree's changes to tracked files) into a temporary directory, runs
// `go run` of both binaries there once (so the docs' own go run lines start
// at once), and then runs the docs session by session, each session one
// bash in that tree's root. Ripgrep 14+ is where scripts/ensure-rg puts it
// (the tree's .tools/bin), CALLSHEET_RG is unset, and the rg on PATH is too
// old for a node (13, as Debian 12 ships), so a block that starts a node
// without saying how it finds rg fails. A session is stopped (SIGTERM to its process group, so its nodes shut down)
// before the next one starts.
//
// # Markup
//
// Every fenced block of commands (```sh, and bash, shell, console, zsh) has
// an HTML comment on the line right above it, which GitHub does not show:
//
//	<!-- doctest: run SESSION [background] [status=N] [timeout=D] -->
//	<!-- doctest: skip REASON -->
//
// A run block runs in the bash of SESSION (its variables and its
// background processes carry over to the session's next blocks), in the
// order of the files (README.md, docs/*.md, docs/*/…, the rest) and of the
// lines; a session's blocks must follow each other. A skip block is not
// run, and says why. A block of commands without either, a fence without
// an info string, and a text block that shows a "$ " prompt are errors
// (TestDocsMarkup), so commands cannot slip in unmarked.
//
// What a block prints is compared with what the docs show:
//
//   - "# " comment lines right after a command line (no blank line between)
//     are that command's output. A comment after a blank line, or before
//     the block's first command, is prose; so is a comment at the end of a
//     command line.
//   - The fenced block right after a run block (the next line; ```json,
//     ```text, ~~~markdown …) is the output of its last commands. A ```json
//     block is compared as JSON text: whitespace outside strings does not
//     count.
//   - Commands with no output shown must print nothing, stdout and stderr
//     alike, and exit 0; status=N expects exit status N of the block's last
//     commands (go run then prints "exit status N" itself).
//   - background starts the block's one command in the background, waits
//     until its stdout has as many lines as the output shown, and compares
//     stdout alone (a node's log, on stderr, depends on the machine).
//
// Before comparing, both sides are normalised (Normaliser): ULIDs, times,
// durations, hashes and other hex of 32 digits or more, base64 keys and
// signatures, loopback ports and pids become placeholders; the temporary
// tree's path is shown as /home/me/callsheet and the machine's host name as
// vm. An ellipsis (…) in the docs stands for any text, on a line or across
// lines: what the docs trimmed.
//
// Hidden setup, commands a reader need not see (start a node for the
// section, wait until it serves), goes in a comment of its own:
//
//	<!-- doctest: setup SESSION
//	make run >make-run.out 2>make-run.log &
//	until grep -qs '^listening on' make-run.out; do sleep 0.2; done
//	-->
//
// Its commands run where it stands and must exit 0; their output is not
// compared. Use it sparingly: what a reader must do belongs in a shown
// block.
//
// go test -run TestDocs ./internal/doctest -args -doctest.session=NAME[,NAME]
// runs those sessions only; -doctest.keep keeps the tree to look at afterwards.
package doctest
