# Workload for tests/data/perl-words.trace.gz: hashes, arrays and growing strings. Deterministic
# (a fixed LCG). Run as: perl words.pl
use strict;
use warnings;

my $state = 12345;
sub rnd { my ($n) = @_; $state = ($state * 1103515245 + 12345) % 2147483648; return ($state >> 16) % $n; }

my @syl = qw(ka lo mi ne ru sa to vi xe zu qua bre);
my @words;
for (1 .. 12000) {
    my $w = '';
    $w .= $syl[ rnd(scalar @syl) ] for 0 .. rnd(4);
    push @words, $w;
}

my (%count, %index);
for my $i (0 .. $#words) {
    my $w = $words[$i];
    $count{$w}++;
    push @{ $index{ substr($w, 0, 3) } }, $i;
}

my $text = '';
for my $w (sort { $count{$b} <=> $count{$a} || $a cmp $b } keys %count) {
    $text .= "$w:$count{$w} ";
}

my @lines;
for (my $i = 0; $i < length $text; $i += 83) {
    push @lines, scalar reverse substr($text, $i, 1 + rnd(160));
}
my @upper = map { (my $u = uc $_) =~ s/A/aa/g; $u } @lines;

delete $index{$_} for grep { rnd(2) } sort keys %index;
my %by_len;
$by_len{ length $_ } .= "$_," for @words;
my @tokens = split /[\s:,]+/, join("\n", @upper, values %by_len);
print scalar(@words), ' ', scalar(keys %count), ' ', scalar(keys %index), ' ', scalar(@tokens), "\n";
