"""python3 split_ids.py BEFORE_IDS HEAD_IDS: HEAD's test node ids split by
whether a test of that name (the part after the module, with its
parameters) existed before: writes ids-common.txt and ids-new.txt here.
Names, not paths, because the tests moved into folders by area. Each list
comes from `pytest --collect-only -q tests` in a clone of that commit."""
import sys


def names(path):
    return [line.strip() for line in open(path) if "::" in line]


def main(before_path, head_path):
    before = set(i.split("::", 1)[1] for i in names(before_path))
    head = names(head_path)
    new = [i for i in head if i.split("::", 1)[1] not in before]
    common = [i for i in head if i.split("::", 1)[1] in before]
    for name, ids in (("ids-common.txt", common), ("ids-new.txt", new)):
        with open(name, "w") as out:
            out.write("\n".join(ids) + "\n")
    print(f"{len(common)} tests of HEAD existed before, {len(new)} are new")


if __name__ == "__main__":
    main(*sys.argv[1:3])
