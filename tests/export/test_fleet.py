"""docs/fleet.md's queries on a generated job of many ranks, and the Parquet export's refusals.

Two jobs of 256 ranks each (tests/export/make_job.py: known peaks, two ranks that run out of
memory for lack of capacity and one because memory is held outside the allocator, one rank with
three times the activations, a site whose bytes are four times larger in job-b) are exported with
`vramtrace export --format parquet`; then every ```sql block of docs/fleet.md runs, in order,
through DuckDB's C API, and each answer is compared with the figures the generator put into the
traces. A block without a check here, or a check whose block is gone, fails the test.

Needs libduckdb.so (scripts/setup-deps.sh installs it; VRAMTRACE_DUCKDB names another): without
it the tests are skipped, and ctest reports them as skipped."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from collections import Counter
from statistics import median

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_job  # noqa: E402
from duckdb_capi import DuckDb, default_library  # noqa: E402

EXE = os.environ.get("VRAMTRACE_EXE", "vramtrace")
DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "fleet.md")
HAVE_DUCKDB = os.path.isfile(default_library())
SKIP_WHY = "skipped: no libduckdb.so at %s (scripts/setup-deps.sh installs it)" % default_library()
RANKS = 256


def run(*args, env=None):
    return subprocess.run([EXE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          timeout=600)


def sql_blocks(text):
    """(check name, sql) of every ```sql block, in order; the name is the fleet-check comment
    right above it, None when there is none."""
    out = []
    for m in re.finditer(r"```sql\n(.*?)```", text, re.S):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        name = re.fullmatch(r"<!-- fleet-check: (\w+) -->", before)
        out.append((name.group(1) if name else None, m.group(1)))
    return out


@unittest.skipUnless(HAVE_DUCKDB, SKIP_WHY)
class FleetQueries(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="vt-fleet-")
        cls.truth = {}
        for job, variant in (("job-a", "a"), ("job-b", "b")):
            p = make_job.params(RANKS, variant)
            make_job.write_job(os.path.join(cls.tmp, "runs", job), p, "zst" if variant == "b" else "none")
            cls.truth[job] = make_job.truth(p)
            r = run("export", os.path.join(cls.tmp, "runs", job), "--format", "parquet", "-o",
                    os.path.join(cls.tmp, "fleet", job))
            assert r.returncode == 0, r.stderr
        cls.cwd = os.getcwd()
        os.chdir(cls.tmp)  # the doc's paths are relative: fleet/<job>/<table>/...
        cls.db = DuckDb()

    @classmethod
    def tearDownClass(cls):
        os.chdir(cls.cwd)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # One check per block of docs/fleet.md, by the name of its fleet-check comment. Rows are
    # tuples of strings (None for NULL), as DuckDB casts the values to text.

    def check_views(self, names, rows):
        total = sum(n for t in self.truth.values() for r in t.values() for n, _ in r["actions"].values())
        self.assertEqual(self.db.query("SELECT count(*) FROM events")[1], [(str(total),)])
        self.assertEqual(self.db.query("SELECT count(*) FROM summaries")[1], [(str(2 * RANKS),)])
        segs = sum(n for t in self.truth.values() for r in t.values() for a, (n, _) in r["actions"].items()
                   if a.startswith("segment_"))
        self.assertEqual(self.db.query("SELECT count(*) FROM segments")[1], [(str(segs),)])

    def check_peak_per_rank(self, names, rows):
        t = self.truth["job-a"]
        self.assertEqual(len(rows), RANKS)
        got = {int(r[0]): r for r in rows}
        for rank, want in t.items():
            row = got[rank]
            self.assertEqual(int(row[names.index("peak_reserved_bytes")]), want["peak_reserved_bytes"], rank)
            self.assertEqual(int(row[names.index("peak_allocated_bytes")]), want["peak_allocated_bytes"], rank)
            self.assertEqual(int(row[names.index("device_total_bytes")]), make_job.TOTAL)
            self.assertEqual(row[names.index("host")], "node-%03d" % (rank // 8))
        order = sorted(t, key=lambda k: (-t[k]["peak_reserved_bytes"], k))
        self.assertEqual([int(r[0]) for r in rows], order)

    def check_ooms(self, names, rows):
        want = [(k, v["oom"]) for k, v in sorted(self.truth["job-a"].items()) if v["oom"]]
        self.assertEqual([int(r[0]) for r in rows], [k for k, _ in want])
        for row, (_, oom) in zip(rows, want):
            self.assertEqual(row[names.index("diagnosis")], oom["diagnosis"])
            self.assertEqual(int(row[names.index("request_bytes")]), oom["request_bytes"])
            self.assertEqual(row[names.index("site")], make_job.SITES["activations"])

    def check_ooms_by_cause(self, names, rows):
        want = []
        for job in sorted(self.truth):
            by = {}
            for rank, v in sorted(self.truth[job].items()):
                if v["oom"]:
                    by.setdefault(v["oom"]["diagnosis"], []).append(rank)
            want += [(job, d, str(len(r)), " ".join(map(str, r))) for d, r in sorted(by.items())]
        self.assertEqual(rows, want)

    def check_imbalance(self, names, rows):
        peaks = {k: v["peak_reserved_bytes"] for k, v in self.truth["job-a"].items()}
        med = median(peaks.values())
        top = max(peaks, key=lambda k: (peaks[k], -k))
        self.assertEqual(rows, [(str(min(peaks.values())), str(int(med)), str(max(peaks.values())),
                                 str(round(max(peaks.values()) / med, 3)), str(top))])
        self.assertEqual(top, 77)  # the generator's imbalanced rank: the check itself must see it

    def check_outlier_ranks(self, names, rows):
        peaks = {k: v["peak_reserved_bytes"] for k, v in self.truth["job-a"].items()}
        med = median(peaks.values())
        want = sorted((k for k, p in peaks.items() if p > 1.1 * med or p < 0.9 * med), key=lambda k: -peaks[k])
        self.assertEqual([int(r[0]) for r in rows], want)
        self.assertEqual(want, [77])

    def site_sums(self, job):
        sums, top = Counter(), Counter()
        for v in self.truth[job].values():
            for site, b in v["sites_at_peak"].items():
                sums[site] += b
                top[site] = max(top[site], b)
        return sums, top

    def check_top_sites(self, names, rows):
        sums, top = self.site_sums("job-a")
        want = [(s, str(b), str(RANKS), str(top[s])) for s, b in sorted(sums.items(), key=lambda x: (-x[1], x[0]))]
        self.assertEqual([(r[0], r[1], r[3], r[4]) for r in rows], want[:10])

    def check_regression_peaks(self, names, rows):
        a, b = self.truth["job-a"], self.truth["job-b"]
        growth = sorted(((b[k]["peak_reserved_bytes"] - a[k]["peak_reserved_bytes"], k) for k in a),
                        key=lambda x: (-x[0], x[1]))[:10]
        self.assertEqual([(int(r[0]), int(r[3])) for r in rows], [(k, g) for g, k in growth])
        for r in rows:
            self.assertEqual(int(r[1]), a[int(r[0])]["peak_reserved_bytes"])
            self.assertEqual(int(r[2]), b[int(r[0])]["peak_reserved_bytes"])

    def check_regression_sites(self, names, rows):
        a, _ = self.site_sums("job-a")
        b, _ = self.site_sums("job-b")
        want = sorted(((s, a[s], b[s]) for s in a), key=lambda x: (-(x[2] - x[1]), x[0]))
        self.assertEqual(rows, [(s, str(x), str(y), str(y - x), str(round(y / x, 3))) for s, x, y in want])
        self.assertEqual(rows[0][0], make_job.SITES["cache"])  # the site that grew

    def check_event_counts(self, names, rows):
        want = []
        for job in sorted(self.truth):
            tot = {}
            for v in self.truth[job].values():
                for a, (n, b) in v["actions"].items():
                    m = tot.get(a, (0, 0))
                    tot[a] = (m[0] + n, m[1] + b)
            want += [(job, a, str(n), str(b)) for a, (n, b) in sorted(tot.items())]
        self.assertEqual(rows, want)

    def check_segment_allocs(self, names, rows):
        want = []
        for job in sorted(self.truth):
            n = [v["actions"]["segment_alloc"][0] for v in self.truth[job].values()]
            want.append((job, str(min(n)), str(max(n)), str(sum(n))))
        self.assertEqual(rows, want)

    def test_every_query_of_the_doc(self):
        with open(DOC) as f:
            blocks = sql_blocks(f.read())
        self.assertGreaterEqual(len(blocks), 8)
        seen = []
        for name, sql in blocks:
            self.assertIsNotNone(name, "a sql block of docs/fleet.md without a fleet-check comment:\n" + sql)
            check = getattr(self, "check_" + name, None)
            self.assertIsNotNone(check, "no check for the block '%s' of docs/fleet.md" % name)
            with self.subTest(block=name):
                names, rows = self.db.query(sql)
                check(names, rows)
            seen.append(name)
        checks = {m[len("check_"):] for m in dir(self) if m.startswith("check_")}
        self.assertEqual(checks - set(seen), set(), "checks whose block is no longer in docs/fleet.md")

    def test_tables_match_the_summary(self):
        # The per-trace figures are the trace model's: the same as `vramtrace summary --json`.
        import json
        trace = os.path.join(self.tmp, "runs", "job-a", "rank0077.jsonl")
        s = json.loads(run("summary", "--json", "--level", "device", trace).stdout)
        names, rows = self.db.query(
            "SELECT peak_reserved_bytes, peak_allocated_bytes, num_ooms FROM summaries WHERE job = 'job-a' "
            "AND rank = 77")
        dev = s["devices"][0] if "devices" in s else s["traces"][0]["devices"][0]
        self.assertEqual(int(rows[0][0]), dev["stats"]["reserved_bytes.all.peak"])
        self.assertEqual(int(rows[0][1]), dev["stats"]["allocated_bytes.all.peak"])


@unittest.skipUnless(HAVE_DUCKDB, SKIP_WHY)
class ParquetErrors(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="vt-pq-err-")
        self.runs = os.path.join(self.tmp, "runs")
        make_job.write_job(self.runs, make_job.params(ranks=3, steps=2, imbalanced_rank=1, capacity_oom_ranks=(),
                                                     outside_oom_ranks=()))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def export(self, out, *extra, env=None):
        return run("export", self.runs, "--format", "parquet", "-o", out, *extra, env=env)

    def test_missing_library(self):
        out = os.path.join(self.tmp, "out")
        env = dict(os.environ, VRAMTRACE_DUCKDB=os.path.join(self.tmp, "nowhere", "libduckdb.so"))
        r = self.export(out, env=env)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("libduckdb.so", r.stderr)
        self.assertIn("scripts/setup-deps.sh", r.stderr)
        self.assertIn("VRAMTRACE_DUCKDB", r.stderr)
        self.assertFalse(os.path.exists(out))
        self.assertEqual(os.listdir(self.tmp), ["runs"])  # no temporary folder left behind

    def test_not_a_duckdb_library(self):
        fake = os.path.join(self.tmp, "libduckdb.so")
        with open(fake, "w") as f:
            f.write("not an ELF file\n")
        r = self.export(os.path.join(self.tmp, "out"), env=dict(os.environ, VRAMTRACE_DUCKDB=fake))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("could not load", r.stderr)

    def test_existing_output_and_force(self):
        out = os.path.join(self.tmp, "job-x")
        self.assertEqual(self.export(out).returncode, 0)
        first = sorted(os.listdir(out))
        self.assertEqual(first, sorted(["events", "segments", "sites", "summaries", "ooms"]))
        r = self.export(out)
        self.assertEqual(r.returncode, 2)
        self.assertIn("already exists", r.stderr)
        r = self.export(out, "--force")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(os.listdir(out)), first)
        # --force never removes a folder that is not an export.
        other = os.path.join(self.tmp, "mine")
        os.makedirs(other)
        open(os.path.join(other, "notes.txt"), "w").close()
        r = self.export(other, "--force")
        self.assertEqual(r.returncode, 2)
        self.assertIn("notes.txt", r.stderr)
        self.assertTrue(os.path.exists(os.path.join(other, "notes.txt")))

    def test_malformed_trace_leaves_nothing(self):
        bad = os.path.join(self.runs, "rank0001.jsonl")
        with open(bad) as f:
            lines = f.read().splitlines()
        lines.insert(3, "{this is not json}")
        with open(bad, "w") as f:
            f.write("\n".join(lines) + "\n")
        out = os.path.join(self.tmp, "out")
        r = self.export(out)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("rank0001.jsonl", r.stderr)
        self.assertFalse(os.path.exists(out))
        self.assertEqual(os.listdir(self.tmp), ["runs"])

    def test_bad_job_name(self):
        r = self.export(os.path.join(self.tmp, "out"), "--job", "a/b")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--job", r.stderr)

    def test_without_rank_and_empty_tables(self):
        # A trace without a rank goes to rank NULL; a table without rows (no OOM here) still has
        # its columns.
        path = os.path.join(self.runs, "rank0000.jsonl")
        with open(path) as f:
            text = f.read().replace('"rank":"0"', '"rank":""', 1)
        with open(path, "w") as f:
            f.write(text)
        out = os.path.join(self.tmp, "job-n")
        r = self.export(out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("no numeric rank", r.stderr)
        db = DuckDb()
        _, rows = db.query("SELECT rank, pid FROM read_parquet('%s/summaries/*/*/*.parquet', hive_partitioning = "
                           "true, hive_types = {'job': VARCHAR, 'rank': BIGINT}) ORDER BY rank NULLS FIRST" % out)
        self.assertEqual(rows, [(None, "10000"), ("1", "10001"), ("2", "10002")])
        names, rows = db.query("SELECT * FROM read_parquet('%s/ooms/*/*/*.parquet', hive_partitioning = true)" % out)
        self.assertEqual(rows, [])
        self.assertIn("diagnosis", names)


if __name__ == "__main__":
    unittest.main()
