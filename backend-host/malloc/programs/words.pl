#!/usr/bin/perl
# Hashes, arrays, strings and regular expressions: generated text (a fixed linear congruential
# generator) counted by word, sorted by frequency, rewritten with substitutions, split and
# joined. Deterministic output. Usage: perl words.pl [N]
use strict;
use warnings;

my $n = shift // 200000;
my $seed = 12345;
# The low bits of this generator cycle quickly: use the high ones.
sub rnd { $seed = ($seed * 1103515245 + 12345) % 2147483648; return int($seed / 65536); }
my @syl = qw(ka lo mi ne ru sa to vi ze qu ph st);
my @vocab;
for (1 .. 4000) {
    my $w = '';
    $w .= $syl[rnd() % @syl] for 1 .. 1 + rnd() % 4;
    push @vocab, $w;
}
my @text = map { $vocab[rnd() % @vocab] } 1 .. $n;
my %count;
my %where;
for my $i (0 .. $#text) {
    $count{$text[$i]}++;
    push @{ $where{$text[$i]} }, $i;
}
my @top = (sort { $count{$b} <=> $count{$a} || $a cmp $b } keys %count)[0 .. 9];
print "distinct ", scalar(keys %count), "\n";
print join(" ", map { "$_=$count{$_}" } @top), "\n";
my $line = join " ", @text;
(my $rewritten = $line) =~ s/\b(\w)(\w*)\b/\u$1\L$2/g;
$rewritten =~ s/(Ka|Lo)(\w+)/$2-$1/g;
my @parts = split /\s+/, $rewritten;
my %lengths;
$lengths{ length $_ }++ for @parts;
print join(",", map { "$_:$lengths{$_}" } sort { $a <=> $b } keys %lengths), "\n";
my $sum = 0;
$sum += scalar @{ $where{$_} } for @top;
my @sorted = sort @parts[0 .. ($#parts < 49999 ? $#parts : 49999)];
print "top positions $sum, ", unpack("%32C*", join("", @sorted)), ", ", length($rewritten), "\n";
