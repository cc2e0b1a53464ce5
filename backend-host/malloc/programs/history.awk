# Prints a `git fast-import` stream of a history of N commits (awk -v n=N [-v lines=L] -f
# history.awk) on one branch: six files of about L lines (40 by default) whose lines change from
# commit to commit, with fixed authors and dates, so that `git log -p` prints the same bytes
# on every run.
function line(f, k, c) { return sprintf("%s line %d of commit %d: %d", f, k, c, (k * 7919 + c * 104729) % 1000003) }
BEGIN {
    if (n == "") n = 200
    if (lines == "") lines = 40
    files = 6
    for (c = 1; c <= n; c++) {
        print "commit refs/heads/main"
        printf "committer Dev %d <dev%d@example.com> %d +0000\n", c % 7, c % 7, 1700000000 + c * 3600
        msg = sprintf("change %d: touch file %d\n\nA longer description of change %d.\n", c, c % files, c)
        printf "data %d\n%s\n", length(msg), msg
        # Every commit rewrites one file: some lines kept, some changed, one added.
        f = c % files
        body = ""
        count = lines + (c % 30)
        for (k = 1; k <= count; k++) {
            if ((k + c) % 5 == 0) body = body line("f" f, k, c) "\n"
            else body = body line("f" f, k, 0) "\n"
        }
        printf "M 100644 inline src/file%d.txt\ndata %d\n%s\n", f, length(body), body
    }
}
