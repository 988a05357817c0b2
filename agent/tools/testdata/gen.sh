# gen.sh makes the patch corpus of patch_test.go: real outputs of git diff
# and diff -u, with the trees before and after. Dates in diff -u headers
# change on every run; nothing else does.
set -e
out=$(cd "$(dirname "$0")" && pwd)/patches   # the corpus: real git diff and diff -u outputs
w=$(mktemp -d)
rm -rf $out; mkdir -p $out
seqfile() { for i in $(seq 1 $1); do echo "line $i of $2"; done; }
gitcase() { # name, setup-before fn, change fn, extra git diff flags
  name=$1; d=$w/$name; rm -rf $d; mkdir -p $d; cd $d; git init -q; git config user.email t@t; git config user.name t
  $2; git add -A; git commit -qm before
  cp -r $d $w/$name.before; rm -rf $w/$name.before/.git
  $3; git add -A
  git diff --cached $4 > $out/$name.patch
  cp -r $d $out/$name.after; rm -rf $out/$name.after/.git
  mv $w/$name.before $out/$name.before
  cd $w
}
b_modify() { seqfile 60 main > main.txt; mkdir -p pkg; printf 'package pkg\n\nfunc A() int { return 1 }\n' > pkg/a.go; }
c_modify() { sed -i 's/^line 5 of main$/line five, changed/; s/^line 40 of main$/line forty/; /^line 50 of main$/d' main.txt; echo 'line 61 added' >> main.txt; sed -i 's/return 1/return 2/' pkg/a.go; }
gitcase git-modify b_modify c_modify
b_newdel() { seqfile 10 old > old.txt; seqfile 5 keep > keep.txt; }
c_newdel() { git rm -q old.txt; mkdir -p src/deep; seqfile 4 new > src/deep/new.txt; sed -i 's/line 3 of keep/line three of keep/' keep.txt; }
gitcase git-new-deleted b_newdel c_newdel
b_rename() { seqfile 30 moved > before.txt; }
c_rename() { git mv before.txt after.txt; sed -i 's/line 20 of moved/line twenty/' after.txt; }
gitcase git-rename b_rename c_rename -M
b_mode() { printf '#!/bin/sh\necho old\n' > run.sh; printf 'data\n' > plain.txt; }
c_mode() { chmod +x run.sh; printf '#!/bin/sh\necho new\n' > tool.sh; chmod +x tool.sh; }
gitcase git-mode b_mode c_mode
b_noeol() { printf 'one\ntwo\nthree' > a.txt; printf 'x\ny\n' > b.txt; }
c_noeol() { printf 'one\ntwo\nthree\nfour\n' > a.txt; printf 'x\ny\nz' > b.txt; }
gitcase git-noeol b_noeol c_noeol
b_spaces() { mkdir -p "my dir"; seqfile 3 sp > "my dir/a file.txt"; }
c_spaces() { sed -i 's/line 2 of sp/line two/' "my dir/a file.txt"; }
gitcase git-spaces b_spaces c_spaces
# diff -u of one file, in place
name=diff-u; mkdir -p $out/$name.before $out/$name.after
seqfile 40 plain > $out/$name.before/notes.txt
sed 's/^line 10 of plain$/line ten/; s/^line 30 of plain$/line thirty/' $out/$name.before/notes.txt > $out/$name.after/notes.txt
(cd $out/$name.before && diff -u notes.txt ../$name.after/notes.txt | sed "s|\.\./$name.after/notes.txt|notes.txt|" > ../$name.patch) || true
# diff -ruN of two trees: changed, new, deleted files
name=diff-ruN; rm -rf $w/old $w/new; mkdir -p $w/old/lib $w/new/lib
seqfile 20 util > $w/old/lib/util.txt; seqfile 5 gone > $w/old/gone.txt
sed 's/line 7 of util/line seven/' $w/old/lib/util.txt > $w/new/lib/util.txt; seqfile 3 fresh > $w/new/fresh.txt
(cd $w && diff -ruN old new > $out/$name.patch) || true
cp -r $w/old $out/$name.before; cp -r $w/new $out/$name.after
