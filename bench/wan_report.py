#!/usr/bin/env python3
"""Aggregate bench/wan.sh runs: print the table, write the CSV and the PNG chart.

  wan_report.py RUNS_CSV META_FILE OUT_CSV OUT_PNG

RUNS_CSV has one row per run (see FIELDS). META_FILE holds "key: value" lines that
are copied into the CSV as "#" comments. The PNG is skipped with a warning when
matplotlib cannot be imported.
"""
import csv
import statistics
import sys

FIELDS = ["variant", "profile", "link_mbit", "dataset", "tool", "rep", "status", "bytes",
          "expected_bytes", "wall_s", "goodput_mbit_s", "cpu_client_s", "cpu_server_s",
          "cpu_emu_s", "rtt_ms", "mtu", "timeline", "note"]
OUT_FIELDS = ["variant", "profile", "link_mbit", "dataset", "tool", "goodput_mbit_s", "limit_mbit_s",
              "ratio_limit", "ratio_link",
              "ratio_best_other", "best_other", "cpu_s_per_gb", "cpu_client_s", "cpu_server_s",
              "cpu_emu_s", "setup_s", "ramp_s", "bulk_s", "bulk_ideal_s", "tail_s",
              "status", "reps_ok", "reps", "samples_mbit_s", "note"]

# TCP/IP headers per packet with timestamps: 20 IP + 20 TCP + 12 options.
HEADERS = 52


def efficiency(mtu):
    return (mtu - HEADERS) / mtu


def limit_mbit(r):
    """The physical limit of a run: its bytes at the link rate times the
    header efficiency, plus two round trips (connect, then one exchange
    before data flows) that no tool avoids."""
    b, link, rtt, mtu = num(r["expected_bytes"]), num(r["link_mbit"]), num(r.get("rtt_ms")), num(r.get("mtu"))
    if not b or not link or rtt is None or not mtu:
        return None
    secs = b * 8 / (link * 1e6 * efficiency(mtu)) + 2 * rtt / 1e3
    return b * 8 / secs / 1e6


def phases(r):
    """Where a haul run's wall time went, from its --json timeline:
    setup (process start to first data), ramp (first data to full rate,
    UDP only), bulk (to every block sent once), tail (re-sends, digests,
    the receiver's summary, exit); and the bulk at the link's rate."""
    t = [num(x) for x in (r.get("timeline") or "").split(";")]
    if len(t) < 5 or None in (t[0], t[2], t[3], t[4]) or num(r["wall_s"]) is None:
        return None
    first, full, fresh, fin, dur = t[:5]
    wall = num(r["wall_s"])
    full = first if full is None else max(full, first)
    b, link, mtu = num(r["expected_bytes"]), num(r["link_mbit"]), num(r.get("mtu"))
    ideal = b * 8 / (link * 1e6 * efficiency(mtu)) if b and link and mtu else None
    return {"first": first, "setup": first + (wall - dur), "ramp": full - first, "bulk": fresh - full,
            "bulk_ideal": ideal, "tail": wall - (wall - dur) - fresh}


def is_ref(tool):
    return tool.startswith("iperf3")


def is_haul(tool):
    return tool.startswith("haul")


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def f(x, fmt="{:.1f}"):
    return "" if x is None else fmt.format(x)


def aggregate(runs):
    groups = {}
    order = []
    for r in runs:
        k = (r["variant"], r["profile"], r["dataset"], r["tool"])
        if k not in groups:
            groups[k] = []
            order.append(k)
        groups[k].append(r)
    rows = []
    for k in order:
        rs = groups[k]
        ok = [r for r in rs if r["status"] == "ok"]
        base = ok
        if ok:
            status = "ok" if len(ok) == len(rs) else f"ok {len(ok)}/{len(rs)}"
        else:
            timeouts = [r for r in rs if r["status"] == "timeout"]
            if timeouts:
                base = [r for r in timeouts if num(r["goodput_mbit_s"]) is not None]
                status = "timeout"
            else:
                base = []
                status = rs[0]["status"]
        gp = med([num(r["goodput_mbit_s"]) for r in base])

        def per_gb(r):
            b, c, s = num(r["bytes"]), num(r["cpu_client_s"]), num(r["cpu_server_s"])
            if not b or c is None or s is None:
                return None
            return (c + s) / (b / 1e9)

        notes = sorted({r["note"] for r in rs if r["note"]})
        lim = limit_mbit(rs[0])
        ph = [p for p in (phases(r) for r in base) if p]
        rows.append({
            "variant": k[0], "profile": k[1], "link_mbit": rs[0]["link_mbit"], "dataset": k[2], "tool": k[3],
            "goodput": gp, "ratio_link": gp / float(rs[0]["link_mbit"]) if gp is not None else None,
            "limit": lim, "ratio_limit": gp / lim if gp is not None and lim else None,
            **{k: med([p[k] for p in ph]) for k in ("first", "setup", "ramp", "bulk", "bulk_ideal", "tail")},
            "rtt_ms": num(rs[0].get("rtt_ms")),
            "cpu_per_gb": med([per_gb(r) for r in base]),
            "cpu_client": med([num(r["cpu_client_s"]) for r in base]),
            "cpu_server": med([num(r["cpu_server_s"]) for r in base]),
            "cpu_emu": med([num(r["cpu_emu_s"]) for r in base]),
            "status": status, "reps_ok": len(ok), "reps": len(rs),
            "samples": ";".join(f(num(r["goodput_mbit_s"])) for r in rs),
            "note": " | ".join(notes),
        })
    # ratio to the best other non-haul, non-reference tool of the same cell (only runs that verified)
    for row in rows:
        row["best"], row["best_other"] = None, ""
        if is_ref(row["tool"]) or row["goodput"] is None:
            continue
        cands = [o for o in rows if (o["variant"], o["profile"], o["dataset"]) ==
                 (row["variant"], row["profile"], row["dataset"]) and o["tool"] != row["tool"]
                 and not is_haul(o["tool"]) and not is_ref(o["tool"]) and o["reps_ok"] > 0
                 and o["goodput"] is not None]
        if cands:
            best = max(cands, key=lambda o: o["goodput"])
            row["best"], row["best_other"] = row["goodput"] / best["goodput"], best["tool"]
    return rows


def write_csv(rows, meta, path):
    with open(path, "w", newline="") as fh:
        for line in meta:
            fh.write(f"# {line}\n")
        w = csv.writer(fh)
        w.writerow(OUT_FIELDS)
        for r in rows:
            w.writerow([r["variant"], r["profile"], r["link_mbit"], r["dataset"], r["tool"], f(r["goodput"]),
                        f(r["limit"]), f(r["ratio_limit"], "{:.3f}"), f(r["ratio_link"], "{:.3f}"), f(r["best"], "{:.3f}"), r["best_other"],
                        f(r["cpu_per_gb"], "{:.2f}"), f(r["cpu_client"], "{:.2f}"), f(r["cpu_server"], "{:.2f}"),
                        f(r["cpu_emu"], "{:.2f}"), *(f(r[k], "{:.3f}") for k in
                                                     ("setup", "ramp", "bulk", "bulk_ideal", "tail")),
                        r["status"], r["reps_ok"], r["reps"], r["samples"], r["note"]])


def print_table(rows, meta):
    print()
    for line in meta:
        print(line)
    hdr = f"{'variant':8} {'profile':11} {'dataset':7} {'tool':13} {'Mbit/s':>8} {'limit':>7} {'xlimit':>6} {'xlink':>6} " \
          f"{'xbest':>6} {'best other':11} {'cpu s/GB':>8} {'emu s':>6}  status"
    print()
    print(hdr)
    print("-" * len(hdr))
    last = None
    for r in rows:
        cell = (r["variant"], r["profile"])
        if last is not None and cell != last:
            print()
        last = cell
        status = r["status"] if r["status"] in ("ok",) else r["status"] + (f" ({r['note']})" if r["note"] else "")
        print(f"{r['variant']:8} {r['profile']:11} {r['dataset']:7} {r['tool']:13} {f(r['goodput']):>8} "
              f"{f(r['limit'], '{:.0f}'):>7} {f(r['ratio_limit'], '{:.3f}'):>6} {f(r['ratio_link'], '{:.2f}'):>6} {f(r['best'], '{:.2f}'):>6} {r['best_other']:11} "
              f"{f(r['cpu_per_gb'], '{:.1f}'):>8} {f(r['cpu_emu'], '{:.1f}'):>6}  {status}")
    print()
    print("Mbit/s: verified file bytes / wall time of the whole transfer (median of verified reps; "
          "for a timeout, bytes received by the cap / cap). iperf3 rows: memory to memory.")
    print("xlink: / link rate. xbest: / best other non-haul tool in the cell (named). "
          "cpu s/GB: user+sys of both ends per 10^9 file bytes. emu s: emulator CPU during the run.")
    print("limit: the physical limit, Mbit/s: the bytes at the link rate x TCP/IP header efficiency "
          f"((MTU - {HEADERS}) / MTU), plus two round trips. xlimit: goodput / limit.")
    timed = [r for r in rows if r.get("bulk") is not None]
    if timed:
        print()
        print("Where haul's wall time went (seconds, medians): setup = outside the session (process start "
              "and exit) plus dialling to the first data; "
              "ramp = to full rate (UDP startup; 0 on a known path); bulk = to every block sent once, "
              "beside the same bytes at the link rate x header efficiency; tail = re-sends, digests, "
              "the receiver's summary and exit.")
        h2 = f"{'profile':11} {'dataset':7} {'tool':13} {'setup':>6} {'ramp':>6} {'bulk':>7} {'ideal':>7} {'tail':>6}"
        print(h2)
        print("-" * len(h2))
        for r in timed:
            print(f"{r['profile']:11} {r['dataset']:7} {r['tool']:13} {f(r['setup'], '{:.2f}'):>6} "
                  f"{f(r['ramp'], '{:.2f}'):>6} {f(r['bulk'], '{:.2f}'):>7} {f(r['bulk_ideal'], '{:.2f}'):>7} "
                  f"{f(r['tail'], '{:.2f}'):>6}")


def ssh_logins(meta):
    """`ssh-login VARIANT PROFILE SECONDS...` lines: `ssh host true` timed
    through the same link, when the servers start and before each run over
    ssh. The median of each cell's samples, and their count."""
    samples = {}
    for line in meta:
        w = line.split()
        if len(w) > 3 and w[0] == "ssh-login":
            samples.setdefault((w[1], w[2]), []).extend(num(x) for x in w[3:])
    return {k: (med(v), len(v)) for k, v in samples.items()}


def print_ssh_start(rows, meta):
    """Issue 26 goal 4: data flows at most one round trip after ssh's own
    login (`ssh host true`, timed through the same link)."""
    logins = ssh_logins(meta)
    cells = [r for r in rows if r["tool"] in ("haul-ssh", "haul-ssh-relay") and r.get("first") is not None
             and logins.get((r["variant"], r["profile"]), (None,))[0] is not None]
    if not cells:
        return
    print()
    print("Start over ssh: 'first data' = when haul's first data left (its --json timeline, from process start; "
          "median); 'ssh login' = `ssh host true` through the same link (median of n samples, taken when the "
          "servers start and before each run over ssh). Goal: first data at most one round trip after the login.")
    h = f"{'variant':8} {'profile':11} {'tool':15} {'ssh login':>9} {'n':>3} {'first data':>10} {'after':>7} {'RTTs':>5}  goal"
    print(h)
    print("-" * len(h))
    for r in cells:
        login, n = logins[(r["variant"], r["profile"])]
        after = r["first"] - login
        rtts = after / (r["rtt_ms"] / 1e3) if r.get("rtt_ms") else None
        verdict = "" if rtts is None else ("PASS" if rtts <= 1.0 else "FAIL")
        print(f"{r['variant']:8} {r['profile']:11} {r['tool']:15} {login:>9.3f} {n:>3} {r['first']:>10.3f} "
              f"{after:>7.3f} {f(rtts, '{:.2f}'):>5}  {verdict}")


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        print(f"warning: no PNG ({e})", file=sys.stderr)
        return False
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    datasets = [d for d in dict.fromkeys(r["dataset"] for r in rows) if d != "-"] or ["-"]
    profiles = list(dict.fromkeys(r["profile"] for r in rows))
    tools = list(dict.fromkeys(r["tool"] for r in rows))
    cmap = plt.get_cmap("tab20")
    color = {t: cmap(i % 20) for i, t in enumerate(tools)}
    # one row per dataset, one column per variant
    fig, axes = plt.subplots(len(datasets), len(variants), squeeze=False,
                             figsize=(max(7.0, 2.0 + 0.2 * len(tools) * len(profiles)) * len(variants),
                                      3.0 * len(datasets) + 0.8))
    width = 0.8 / max(1, len(tools))
    for vi, v in enumerate(variants):
        for di, d in enumerate(datasets):
            ax = axes[di][vi]
            for ti, t in enumerate(tools):
                xs, ys, hatch = [], [], []
                for pi, p in enumerate(profiles):
                    m = [r for r in rows if r["variant"] == v and r["profile"] == p and r["tool"] == t
                         and r["dataset"] in (d, "-")]
                    if not m or m[0]["goodput"] is None:
                        continue
                    xs.append(pi + (ti - (len(tools) - 1) / 2) * width)
                    ys.append(m[0]["goodput"])
                    hatch.append(m[0]["reps_ok"] == 0)
                if not xs:
                    continue
                bars = ax.bar(xs, ys, width, color=color[t], label=t,
                              edgecolor="black" if is_ref(t) else None, linewidth=0.6)
                for b, h in zip(bars, hatch):
                    if h:
                        b.set_hatch("//")
                        b.set_alpha(0.5)
            for pi, p in enumerate(profiles):
                link = next((float(r["link_mbit"]) for r in rows if r["profile"] == p), None)
                if link:
                    ax.hlines(link, pi - 0.45, pi + 0.45, colors="grey", linestyles="dashed", linewidth=0.8)
            ax.set_xticks(range(len(profiles)))
            ax.set_xticklabels(profiles, fontsize=8)
            ax.set_yscale("log")
            ax.set_ylabel("goodput, Mbit/s (log)")
            ax.set_title(f"{v} / {d}", fontsize=10)
            ax.grid(axis="y", which="major", alpha=0.3)
    handles, labels = [], []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if labels:
        fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 6), fontsize=8)
    fig.text(0.01, 0.005, "dashed: link rate; hatched: timeout (bytes by the cap); iperf3: memory to memory",
             fontsize=7)
    top = 1 - 0.45 / fig.get_figheight()
    fig.tight_layout(rect=(0, 0.02, 1, top))
    fig.savefig(path, dpi=110)
    return True


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    runs_csv, meta_file, out_csv, out_png = sys.argv[1:]
    with open(runs_csv, newline="") as fh:
        runs = list(csv.DictReader(fh))
    with open(meta_file) as fh:
        meta = [line.rstrip("\n") for line in fh if line.strip()]
    rows = aggregate(runs)
    write_csv(rows, meta, out_csv)
    print_table(rows, meta)
    print_ssh_start(rows, meta)
    print(f"CSV: {out_csv}")
    if not any(r["goodput"] is not None for r in rows):
        print("no PNG: no run produced a goodput", file=sys.stderr)
        return
    try:
        if plot(rows, out_png):
            print(f"PNG: {out_png}")
    except Exception as e:  # noqa: BLE001 -- the table and CSV matter more than the chart
        print(f"warning: PNG failed: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()
