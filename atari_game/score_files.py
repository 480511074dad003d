"""Reading the scores a report aggregates: the evaluation JSONs of ``atari-game evaluate``, run directories holding
them, and CSVs of published or collected scores."""

from __future__ import annotations

import csv
import json
import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from atari_game.evaluation import FORMAT, VERSION
from atari_game.game import resolve_game

#: The columns a CSV input must have (in any order; others are ignored).
CSV_COLUMNS = ("algorithm", "game", "run_seed", "score")
#: The old spellings of a field of a CSV or an evaluation JSON, still read for one release: old name -> current name.
OLD_NAMES = {"seed": "run_seed"}


class Score(NamedTuple):
    """One run (one training seed) of one algorithm on one game: `score` is the mean return of its evaluation
    episodes; `game` is the ale-py ROM id; `source` is the file (and for a CSV, the line) it was read from; `frames`
    the emulator frames the agent trained for, where its evaluation says (a CSV row's: unknown, None)."""

    algorithm: str
    game: str
    run_seed: int
    score: float
    source: str
    frames: int | None = None

    @property
    def seed(self) -> int:
        """`run_seed` by its old name, for one more release (a `DeprecationWarning`)."""
        warnings.warn("Score.seed is now Score.run_seed; the old name goes in the next release", DeprecationWarning, 2)
        return self.run_seed


def _current_names(names: Sequence[str], path: Path) -> list[str]:
    """`names` (a CSV's header, an evaluation's keys) with each old spelling in `OLD_NAMES` replaced by its current
    one, unless the file has that too; a `DeprecationWarning` naming the file and both spellings for each."""
    # A file with both spellings is read by its current one; its old one stays, unread.
    renamed = [OLD_NAMES[name] if OLD_NAMES.get(name, name) not in names else name for name in names]
    for old, new in zip(names, renamed, strict=True):
        if old != new:
            warnings.warn(
                f"{path} calls {new!r} by its old name {old!r}, read for one more release: rename it {new!r}",
                DeprecationWarning,
                stacklevel=2,
            )
    return renamed


def _row_score(row: Mapping[str, str | None], source: str) -> Score:
    """The `Score` of one CSV row; `ValueError` saying what is wrong with it."""
    algorithm, game, run_seed, score = (row[column] for column in CSV_COLUMNS)
    if algorithm is None or game is None or run_seed is None or score is None:
        raise ValueError("fewer values than the header has columns")
    if not algorithm.strip():
        raise ValueError("no algorithm")
    if not run_seed.strip().isdigit():
        raise ValueError(f"run_seed {run_seed!r} is not a non-negative integer")
    try:
        value = float(score)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"score {score!r} is not a finite number")
    return Score(algorithm.strip(), resolve_game(game), int(run_seed), value, source)


def _read_csv(path: Path) -> list[Score]:
    """The rows of a CSV of published or collected scores."""
    with path.open(newline="") as file:
        reader = csv.DictReader(file)
        reader.fieldnames = _current_names(reader.fieldnames or [], path)
        missing = [column for column in CSV_COLUMNS if column not in reader.fieldnames]
        if missing:
            # The per-game CSV beside an evaluation's JSON has episodes, not runs: the JSON is what reports read.
            hint = ""
            if "episode" in reader.fieldnames:
                beside = path.with_suffix(".json")
                hint = f"; give {beside}, the evaluation" if beside.is_file() else "; give the evaluation's .json"
            raise ValueError(
                f"{path}, line 1: the header must contain {','.join(CSV_COLUMNS)} (missing {', '.join(missing)}){hint}"
            )
        scores = []
        for row in reader:
            source = f"{path}, line {reader.line_num}"
            try:
                scores.append(_row_score(row, source))
            except ValueError as error:
                raise ValueError(f"{source}: {error}") from None
    return scores


def _read_evaluation(path: Path) -> tuple[Score, str, str, tuple[int, int]]:
    """The score of an evaluation JSON written by ``atari-game evaluate``, its protocol, the checkpoint it scored
    if that was saved after the evaluation (a run resumed since: the score is of an older agent), else "", and how
    many of its games the frame cap cut, of how many (none for an evaluation that did not record it)."""
    try:
        data = json.loads(path.read_text())
    except ValueError as error:
        raise ValueError(f"{path}: not a JSON file ({error})") from None
    got = (data.get("format"), data.get("version")) if isinstance(data, dict) else (None, None)
    if got != (FORMAT, VERSION):
        raise ValueError(
            f"{path}: expected an evaluation written by `atari-game evaluate` (format {FORMAT!r}, version {VERSION}), "
            f"got format {got[0]!r}, version {got[1]!r}"
        )
    data = dict(zip(_current_names(list(data), path), data.values(), strict=True))
    try:
        frames = None if data.get("frames_trained") is None else int(data["frames_trained"])
        game, mean = resolve_game(data["game"]), float(data["mean"])
        score = Score(str(data["algorithm"]), game, int(data["run_seed"]), mean, str(path), frames)
        checkpoint = Path(str(data.get("checkpoint") or ""))
        newer = checkpoint.is_file() and checkpoint.stat().st_mtime > path.stat().st_mtime
        episodes = data.get("episodes") or []
        cut = sum(bool(episode.get("truncated")) for episode in episodes)
        return score, str(data["protocol"]) or "no protocol", str(checkpoint) if newer else "", (cut, len(episodes))
    except KeyError as error:
        raise ValueError(f"{path}: the evaluation has no {error} field") from None
    except (AttributeError, TypeError, ValueError) as error:
        raise ValueError(f"{path}: {error}") from None


class Inputs(NamedTuple):
    """What a report's inputs hold: every `Score`, in input order; each algorithm's protocols, sorted, with "as
    published" for its CSV rows; the evaluations whose checkpoint was saved after them (evaluation file:
    checkpoint), whose scores are of an older agent; and those with games cut at the frame cap (evaluation file:
    (games cut, games)), whose scores are partly the cap's."""

    scores: list[Score]
    protocols: dict[str, list[str]]
    outdated: dict[str, str]
    capped: dict[str, tuple[int, int]]


def read_inputs(paths: Sequence[str | Path]) -> Inputs:
    """The `Inputs` of `paths`, read and checked as `load_scores` says."""
    scores: list[Score] = []
    evaluated: dict[str, dict[str, str]] = {}  # algorithm -> protocol -> first file
    published: set[str] = set()  # algorithms with CSV rows
    read: set[Path] = set()  # the files read so far: one given more than once (by name, in its folder) counts once
    by_name: set[Path] = set()  # the files given by name (whether or not a folder given holds them too)
    protocol_of: dict[str, str] = {}  # each evaluation file's protocol
    outdated: dict[str, str] = {}  # evaluation file -> its checkpoint, saved after it
    capped: dict[str, tuple[int, int]] = {}  # evaluation file -> (games cut at the frame cap, games)
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file or run directory")
        # A run directory stands for its evaluations, a directory of runs (runs/) for theirs, and so does the folder
        # of `atari-game evaluate --out DIR` (its files named RUN-evaluation-PROTOCOL.json).
        files = [path]
        if path.is_dir():
            files = sorted(path.glob("*evaluation*.json")) or sorted(path.glob("*/*evaluation*.json"))
        if not files and (path / "checkpoint.pt").is_file():  # a run not evaluated yet: the command that does it
            raise ValueError(
                f"{path} holds a run but no evaluation: run `atari-game evaluate {path / 'checkpoint.pt'}` first "
                "(it writes evaluation-PROTOCOL.json there)"
            )
        if not files:
            raise ValueError(
                f"{path} has no *evaluation*.json, nor do its run directories: run `atari-game evaluate "
                f"RUN/checkpoint.pt` first (it writes RUN/evaluation-PROTOCOL.json; with --out {path}, "
                f"{path}/RUN-evaluation-PROTOCOL.json), or name evaluation JSONs or score CSVs"
            )
        for file in files:
            resolved = file.resolve()
            if file == path:
                by_name.add(resolved)
            if resolved in read:
                continue
            read.add(resolved)
            if file.suffix == ".csv":
                rows = _read_csv(file)
                scores += rows
                published.update(score.algorithm for score in rows)
            elif file.suffix == ".json":
                score, protocol, newer, (cut, games) = _read_evaluation(file)
                scores.append(score)
                if newer:
                    outdated[score.source] = newer
                if cut:
                    capped[score.source] = (cut, games)
                protocol_of[score.source] = protocol
                evaluated.setdefault(score.algorithm, {}).setdefault(protocol, score.source)
            else:
                raise ValueError(f"{file}: expected a .csv of scores, an evaluation .json or a run directory")
    # One run is one score: the same one twice would count twice.
    seen: dict[tuple[str, str, int], str] = {}
    for score in scores:
        key = score[:3]
        if key in seen:
            # Two evaluation files in one folder given, which stands for all of them (a second protocol, checkpoint):
            # name the one to report. Two given by name: one run under two protocols, or two agents under one name.
            both_json = Path(seen[key]).suffix == Path(score.source).suffix == ".json"
            one_run = both_json and Path(seen[key]).parent == Path(score.source).parent
            hint = ""
            if one_run and not {Path(seen[key]).resolve(), Path(score.source).resolve()} <= by_name:
                hint = "; give the evaluation to report by its file name"
            elif both_json and protocol_of[seen[key]] != protocol_of[score.source]:
                hint = (
                    f"; one run evaluated under {protocol_of[seen[key]]} and {protocol_of[score.source]}? give the one "
                    "to report"
                )
            elif both_json:
                hint = (
                    "; two agents? name them apart: atari-game evaluate --algorithm NAME (from Python, "
                    "atari_game.evaluate(..., algorithm=NAME))"
                )
            raise ValueError(
                f"algorithm {score.algorithm!r}, game {score.game!r}, run seed {score.run_seed} appears twice: in "
                f"{seen[key]} and in {score.source}{hint}"
            )
        seen[key] = score.source
    # Scores played under different settings measure different things.
    for algorithm, protocols in evaluated.items():
        if len(protocols) > 1:
            named = ", ".join(f"{name} ({source})" for name, source in sorted(protocols.items()))
            raise ValueError(
                f"algorithm {algorithm!r} was evaluated under different protocols: {named}; scores under different "
                "protocols are not comparable"
            )
    protocols_of = {
        algorithm: sorted(evaluated.get(algorithm, {})) + (["as published"] if algorithm in published else [])
        for algorithm in sorted({score.algorithm for score in scores})
    }
    return Inputs(scores, protocols_of, outdated, capped)


def load_scores(paths: Sequence[str | Path]) -> list[Score]:
    """All scores of `paths`, in input order. A path is a CSV with the columns `CSV_COLUMNS` (published tables:
    run_seed 0), an evaluation JSON of ``atari-game evaluate``, or a run directory (its ``evaluation*.json``); a file
    given more than once (by name, in its folder) counts once. Raises `ValueError` naming the file (and line) of a
    bad input, two scores of one algorithm, game and run seed, or an algorithm evaluated under different protocols, and
    `FileNotFoundError` for a path that does not exist."""
    return read_inputs(paths).scores
