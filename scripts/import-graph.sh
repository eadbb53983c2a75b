#!/usr/bin/env bash
# Prints the module import graph of one crate and the cycles in it:
#   scripts/import-graph.sh rehash/src
# A node is a top-level module (`plan` for plan.rs, plan/mod.rs and plan/*.rs; `crate` for the
# items lib.rs itself defines). An edge `a -> b: X, Y` says that module a names b's items X, Y
# through a `crate::` path (a `use` or a path in the code; intra-doc links and other comments
# are not imports). A path through a root re-export (`crate::Plan`, with `pub use
# plan::Plan` in lib.rs) counts as naming the module the item comes from; lib.rs's own
# `pod::X` paths (outside `mod` and `pub use` lines) are edges from `crate`. `super::` paths
# stay inside a module, so they are not edges.
# Then every elementary cycle, `a -> b -> a`, or "cycles: none". Exits 1 when there is a cycle,
# so a check can run it.
set -euo pipefail
src=${1:?usage: $0 CRATE_SRC_DIR (e.g. rehash/src)}
[ -d "$src" ] || { echo "$0: $src: not a directory" >&2; exit 2; }
root=$src/lib.rs
[ -f "$root" ] || root=$src/main.rs
[ -f "$root" ] || { echo "$0: $src has neither lib.rs nor main.rs" >&2; exit 2; }
find "$src" -name '*.rs' | sort | perl -e '
use strict; use warnings;
my ($src, $root) = @ARGV;
my @files = map { chomp; $_ } <STDIN>;
sub slurp { local $/; open my $f, "<", $_[0] or die "$_[0]: $!"; my $t = <$f>; $t }
# comments and literals out, so that only code is read
sub code_of {
    my $t = shift;
    $t =~ s{ (//[^\n]*) | (/\*.*?\*/) | (r(\#*)".*?"\4) | ("(?:\\.|[^"\\])*") | (\x27(?:\\.|[^\\\x27])\x27) }{ }gsx;
    $t;
}
sub module_of {
    my $rel = substr(shift, length($src) + 1);
    return "crate" if $rel eq "lib.rs" || $rel eq "main.rs";
    $rel =~ s{\.rs$}{};
    return (split m{/}, $rel)[0];
}
my %is_module = map { module_of($_) => 1 } @files;
delete $is_module{crate};
# a use tree at pos($$s): the flat paths it names, as arrays of segments
sub ws { my $s = shift; $$s =~ /\G\s*/gc }
sub tree {
    my ($s) = @_;
    my @segs;
    while (1) {
        ws($s);
        if ($$s =~ /\G\{/gc) {
            my @out;
            while (1) {
                ws($s);
                last if $$s =~ /\G\}/gc;
                push @out, map { [@segs, @$_] } tree($s);
                ws($s);
                $$s =~ /\G,/gc;
                ws($s);
                last if $$s =~ /\G\}/gc;
            }
            return @out;
        }
        if ($$s =~ /\G(\w+|\*)/gc) {
            push @segs, $1;
            ws($s);
            next if $$s =~ /\G::/gc;
            $$s =~ /\Gas\s+\w+/gc;
        }
        return ([@segs]);
    }
}
# what lib.rs re-exports from where: item -> module
my %reexport;
{
    my $t = code_of(slurp($root));
    while ($t =~ /\bpub\s+use\s+/g) {
        my $s = \$t;
        for my $p (tree($s)) {
            next unless @$p >= 2 && $is_module{$p->[0]};
            $reexport{$p->[-1]} = $p->[0];
        }
    }
}
my %edges;    # from -> to -> { item => 1 }
for my $file (@files) {
    my $from = module_of($file);
    my $t = code_of(slurp($file));
    if ($from eq "crate") {
        # the root names its modules without `crate::`
        (my $body = $t) =~ s/^\s*(pub(\([^)]*\))?\s+)?(mod|use)\b[^;]*;//mg;
        while ($body =~ /(?<![\w:])(\w+)::/g) {
            my $m = $1;
            next unless $is_module{$m};
            my $s = \$body;
            pos($body) = pos($body) - length($m) - 2;
            for my $p (tree($s)) {
                $edges{crate}{$m}{ join("::", @$p[1 .. $#$p]) || $m } = 1;
            }
        }
        next;
    }
    while ($t =~ /\bcrate::/g) {
        my $s = \$t;
        for my $p (tree($s)) {
            next unless @$p;
            my ($to, $item);
            if ($is_module{$p->[0]}) {
                ($to, $item) = ($p->[0], join("::", @$p[1 .. $#$p]) || "self");
            } elsif (my $m = $reexport{$p->[0]}) {
                ($to, $item) = ($m, $p->[0]);
            } else {
                ($to, $item) = ("crate", $p->[0]);
            }
            next if $to eq $from;
            $edges{$from}{$to}{$item} = 1;
        }
    }
}
print "edges:\n";
for my $a (sort keys %edges) {
    for my $b (sort keys %{ $edges{$a} }) {
        print "  $a -> $b: ", join(", ", sort keys %{ $edges{$a}{$b} }), "\n";
    }
}
# elementary cycles, each once: from its smallest node, through larger ones only
my @nodes = sort keys %{ { map { $_ => 1 } keys %edges, map { keys %$_ } values %edges } };
my @cycles;
for my $start (@nodes) {
    my @stack = ($start);
    my %on = ($start => 1);
    my $walk;
    $walk = sub {
        my $n = shift;
        for my $next (sort keys %{ $edges{$n} || {} }) {
            if ($next eq $start) { push @cycles, join(" -> ", @stack, $start); next }
            next if $on{$next} || $next lt $start;
            push @stack, $next; $on{$next} = 1;
            $walk->($next);
            pop @stack; delete $on{$next};
        }
    };
    $walk->($start);
}
if (@cycles) {
    print "cycles:\n";
    print "  $_\n" for @cycles;
    exit 1;
}
print "cycles: none\n";
' "$src" "$root"
