"""The fsspec file system (gust://): fsspec's own abstract tests, and round trips
through pandas, pyarrow and dask."""

import posixpath
import uuid

import fsspec
import fsspec.tests.abstract as abstract
import pytest

import gustfs
from gustfs.fsspec import GustFileSystem


class GustFixtures(abstract.AbstractFixtures):
    @pytest.fixture(scope="class")
    @classmethod
    def fs(cls, instance):
        return GustFileSystem()

    @pytest.fixture
    def fs_join(self):
        return posixpath.join

    @pytest.fixture
    def fs_path(self, fs):
        p = "/fsspec-" + uuid.uuid4().hex[:8]
        fs.mkdir(p)
        yield p
        fs.rm(p, recursive=True)


class TestGustCopy(abstract.AbstractCopyTests, GustFixtures):
    pass


class TestGustGet(abstract.AbstractGetTests, GustFixtures):
    pass


class TestGustPut(abstract.AbstractPutTests, GustFixtures):
    pass


class TestGustOpen(abstract.AbstractOpenTests, GustFixtures):
    pass


class TestGustPipe(abstract.AbstractPipeTests, GustFixtures):
    pass


def test_registered_by_entry_point(instance):
    assert fsspec.get_filesystem_class("gust") is GustFileSystem
    fs, path = fsspec.core.url_to_fs("gust:///some/where")
    assert isinstance(fs, GustFileSystem) and path == "/some/where"
    assert GustFileSystem._strip_protocol("gust://a/b/") == "/a/b"
    assert fs.unstrip_protocol("/a") == "gust:///a"


def test_basic_operations(instance, d):
    fs = fsspec.filesystem("gust")
    with fsspec.open(f"gust://{d}/a.txt", "w") as f:
        f.write("hello")
    assert fs.cat_file(f"{d}/a.txt") == b"hello"
    assert fs.cat_file(f"{d}/a.txt", start=1, end=-1) == b"ell"
    assert fs.cat_file(f"{d}/a.txt", start=-2) == b"lo"
    info = fs.info(f"gust://{d}/a.txt")
    assert info["name"] == f"{d}/a.txt" and info["size"] == 5 and info["type"] == "file"
    fs.makedirs(f"{d}/sub/deeper")
    fs.pipe_file(f"{d}/sub/deeper/b.bin", b"\x00\x01")
    assert fs.ls(d, detail=False) == [f"{d}/a.txt", f"{d}/sub"]
    assert fs.find(d) == [f"{d}/a.txt", f"{d}/sub/deeper/b.bin"]
    assert [e["type"] for e in fs.ls(d)] == ["file", "directory"]
    assert fs.du(d) == 7
    assert fs.glob(f"{d}/**/*.bin") == [f"{d}/sub/deeper/b.bin"]
    fs.mv(f"{d}/sub", f"{d}/moved")
    assert fs.exists(f"{d}/moved/deeper/b.bin") and not fs.exists(f"{d}/sub")
    fs.cp_file(f"{d}/a.txt", f"{d}/copy.txt")
    assert fs.cat_file(f"{d}/copy.txt") == b"hello"
    fs.touch(f"{d}/empty")
    assert fs.size(f"{d}/empty") == 0
    assert fs.modified(f"{d}/a.txt").year >= 2024
    with pytest.raises(FileNotFoundError):
        fs.info(f"{d}/nope")
    with pytest.raises(ValueError):
        fs.rm(f"{d}/moved")
    fs.rm(f"{d}/moved", recursive=True)
    assert not fs.exists(f"{d}/moved")
    # Text and compression through fsspec's own layers.
    with fsspec.open(f"gust://{d}/z.gz", "wt", compression="gzip") as f:
        f.write("compressed\n")
    with fsspec.open(f"gust://{d}/z.gz", "rt", compression="infer") as f:
        assert f.read() == "compressed\n"


def test_pandas_csv_and_parquet(instance, d):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"id": range(1000), "name": [f"n{i}" for i in range(1000)], "x": [i / 7 for i in range(1000)]})
    df.to_csv(f"gust://{d}/t.csv", index=False)
    back = pd.read_csv(f"gust://{d}/t.csv")
    pd.testing.assert_frame_equal(back, df)
    assert gustfs.read_bytes(f"{d}/t.csv").startswith(b"id,name,x\n")
    df.to_parquet(f"gust://{d}/t.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(f"gust://{d}/t.parquet"), df)


def test_pyarrow_dataset(instance, d):
    pa = pytest.importorskip("pyarrow")
    ds = pytest.importorskip("pyarrow.dataset")
    fs = GustFileSystem()
    table = pa.table({"part": [i % 3 for i in range(3000)], "v": list(range(3000))})
    ds.write_dataset(table, f"{d}/ds", format="parquet", partitioning=["part"], filesystem=fs)
    assert sorted(fs.ls(f"{d}/ds", detail=False)) == [f"{d}/ds/{i}" for i in range(3)]
    dataset = ds.dataset(f"{d}/ds", format="parquet", partitioning=["part"], filesystem=fs)
    got = dataset.to_table().sort_by("v")
    assert got.column("v").to_pylist() == list(range(3000))
    assert got.column("part").to_pylist() == [i % 3 for i in range(3000)]
    only1 = dataset.to_table(filter=ds.field("part") == 1)
    assert only1.num_rows == 1000


def test_dask_dataframe(instance, d):
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    df = pd.DataFrame({"k": [i % 5 for i in range(500)], "v": range(500)})
    for i in range(4):
        df.iloc[i * 125 : (i + 1) * 125].to_csv(f"gust://{d}/part{i}.csv", index=False)
    ddf = dd.read_csv(f"gust://{d}/part*.csv")
    assert ddf.npartitions == 4
    sums = ddf.groupby("k").v.sum().compute(scheduler="threads").sort_index()
    pd.testing.assert_series_equal(sums, df.groupby("k").v.sum(), check_names=False)
    ddf.to_parquet(f"gust://{d}/out", write_index=False)
    back = dd.read_parquet(f"gust://{d}/out").compute(scheduler="sync")
    assert sorted(back.v.tolist()) == list(range(500))
