# tests/md_slug.awk: a Markdown heading's anchor as GitHub makes it, for tests/docs_check.sh (links to
# #anchors) and tests/docs_figures.sh (the history entry a figure cites): the heading as rendered (links
# and `code` marks dropped), lower case, spaces to '-', every character other than a-z 0-9 - _ dropped.
# A repeated heading's -1, -2 is the caller's to add.
function slug(t,    s, i, c, out, inner) {
    while (match(t, /!?\[[^]]*\]\([^)]*\)/)) {
        inner = substr(t, RSTART, RLENGTH); sub(/^!?\[/, "", inner); sub(/\]\(.*$/, "", inner)
        t = substr(t, 1, RSTART - 1) inner substr(t, RSTART + RLENGTH)
    }
    gsub(/<[^>]*>/, "", t); gsub(/[`*]/, "", t)
    sub(/^[ \t]+/, "", t); sub(/[ \t]+$/, "", t)
    t = tolower(t); out = ""
    for (i = 1; i <= length(t); i++) {
        c = substr(t, i, 1)
        if (c ~ /[a-z0-9_-]/) out = out c
        else if (c == " ") out = out "-"
    }
    return out
}
