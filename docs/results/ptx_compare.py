"""Which kernels two PTX builds compile differently: every `.entry` of OLD against the same
entry of NEW, with what differs between builds of the same code set aside (branch labels,
call-sequence numbers, anonymous symbols' hashes and numbers, `.globl` comments). A kernel
that compares equal runs the same instructions, so a change that leaves a kernel equal
cannot make it slower.

Usage: python3 docs/results/ptx_compare.py OLD.ptx NEW.ptx
(a commit's PTX: git show COMMIT:host/kernels/gpu_select_kernels.ptx.zst | zstd -d > OLD.ptx)
"""
import re
import sys


def entries(path):
    text = open(path).read()
    found = {}
    for part in re.split(r"(?=\.visible \.entry )", text)[1:]:
        name = re.match(r"\.visible \.entry (\w+)", part).group(1)
        labels = {}

        def label(match):
            return labels.setdefault(match.group(0), f"L{len(labels)}")

        part = re.sub(r"\$L__BB\d+_\d+", label, part)
        part = re.sub(r"__local_depot\d+", "DEPOT", part)
        part = re.sub(r"callseq \d+", "callseq N", part)
        # Anonymous constants (panic locations, tables) renumber when another kernel's code
        # adds or drops one: numbered here by first use within the entry, as the labels.
        anons = {}
        part = re.sub(
            r"anon_\$_[0-9a-f]+_\$_\d+", lambda m: anons.setdefault(m.group(0), f"ANON{len(anons)}"), part
        )
        part = re.sub(r"// \.globl\s+\w+", "", part)
        found[name] = part
    return found


old, new = entries(sys.argv[1]), entries(sys.argv[2])
same = [name for name in old if name in new and old[name] == new[name]]
changed = [name for name in old if name in new and old[name] != new[name]]
print(f"{len(old)} kernels before, {len(new)} after: {len(same)} the same, {len(changed)} changed, "
      f"{len([n for n in new if n not in old])} new, {len([n for n in old if n not in new])} gone")
for name in changed:
    print("changed:", name)
