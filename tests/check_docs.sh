#!/usr/bin/env bash
# Documentation that mirrors a declared list must name every entry of it, and no other;
# the README stays short enough to read in a newcomer's first hour.
set -u
cd "$(dirname "$0")/.."
status=0
declared=$(grep -oE '^SIMGPU_OPTION\(SIMGPU_[A-Z0-9_]+' tests/simgpu/options.def | cut -d'(' -f2 | sort)
documented=$(grep -oE '^\| `SIMGPU_[A-Z0-9_]+`' docs/simgpu.md | tr -d '|` ' | sort)
if [ "$declared" != "$documented" ]; then
	echo "docs/simgpu.md settings table and tests/simgpu/options.def disagree:"
	diff <(echo "$declared") <(echo "$documented")
	status=1
fi
declared=$(grep -oE '^LYNX_OPTION\(LYNX_[A-Z0-9_]+' shim/options.def | cut -d'(' -f2 | sort)
documented=$(grep -oE '^\| `LYNX_[A-Z0-9_]+`' docs/settings.md | tr -d '|` ' | sort)
if [ "$declared" != "$documented" ]; then
	echo "docs/settings.md settings table and shim/options.def disagree:"
	diff <(echo "$declared") <(echo "$documented")
	status=1
fi
# The README is for a newcomer's first hour; the rest belongs under docs/.
max_words=1500
words=$(wc -w <README.md)
if [ "$words" -gt "$max_words" ]; then
	echo "README.md has $words words, over $max_words: move detail to docs/"
	status=1
fi
# The demo's numbers the README quotes are what `make demo` printed last (its headline's
# first sentence, kept in $BUILD/demo-headline.txt); without a demo run they are not checked.
quote="${BUILD:-build}/demo-headline.txt"
demo="README's demo numbers not checked (no $quote: run make demo)"
if [ -s "$quote" ]; then
	said=$(tr -s ' \n' ' ' <"$quote" | sed 's/ $//')
	if tr -s ' \n' ' ' <README.md | grep -qF "$said"; then
		demo="README.md quotes make demo's headline ($quote)"
	else
		echo "README.md does not quote what make demo printed last: \"$said\" ($quote)"
		status=1
	fi
fi
[ $status -eq 0 ] && echo "check_docs: settings tables match options.def (simgpu and Lynx);" \
	"README.md has $words words (at most $max_words); $demo"
exit $status
