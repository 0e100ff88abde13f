#!/usr/bin/env bash
# publish_branch.sh FOLDER BRANCH MESSAGE: make FOLDER's files the only commit of BRANCH on origin (force-pushed), from
# the checkout this runs in, with the credentials actions/checkout left there. The commit has no parent: the branch is
# generated (pages.yml's launch copies), and its history would only grow. Nothing in the checkout changes (a
# temporary index).
set -euo pipefail
folder="$1" branch="$2" message="$3"
[ -d "$folder" ] || { echo "publish_branch.sh: no folder $folder" >&2; exit 2; }
index="$(mktemp)"
trap 'rm -f "$index"' EXIT
export GIT_INDEX_FILE="$index"
rm -f "$index"
git --work-tree="$folder" add --all --force
tree="$(git write-tree)"
commit="$(GIT_AUTHOR_NAME="github-actions[bot]" GIT_AUTHOR_EMAIL="41898282+github-actions[bot]@users.noreply.github.com" \
    GIT_COMMITTER_NAME="github-actions[bot]" GIT_COMMITTER_EMAIL="41898282+github-actions[bot]@users.noreply.github.com" \
    git commit-tree "$tree" -m "$message")"
git push --force origin "$commit:refs/heads/$branch"
echo "publish_branch.sh: $branch is $commit ($(git ls-tree -r --name-only "$tree" | wc -l) files)"
