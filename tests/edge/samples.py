"""Real sample files of every media type, generated with the same libraries users' tools use.

The video is encoded with PyAV, whose wheel ships FFmpeg and its encoders, so the tests need no
system codec.
"""

from __future__ import annotations

import io
import json
import struct
import wave
import zipfile
from fractions import Fraction

import av
import ezdxf
from PIL import Image, TiffImagePlugin, TiffTags
from pypdf import PdfWriter
from pypdf.generic import DictionaryObject, NameObject, StreamObject


def _rational(value: float) -> TiffImagePlugin.IFDRational:
    fraction = Fraction(value).limit_denominator(10000)
    return TiffImagePlugin.IFDRational(fraction.numerator, fraction.denominator)


def _dms(value: float) -> tuple[TiffImagePlugin.IFDRational, ...]:
    value = abs(value)
    degrees = int(value)
    minutes = int((value - degrees) * 60)
    seconds = (value - degrees - minutes / 60) * 3600
    return (_rational(degrees), _rational(minutes), _rational(round(seconds, 4)))


def jpeg_with_gps(latitude: float = 48.8584, longitude: float = -2.2945) -> bytes:
    """A 320x240 JPEG with EXIF capture time, camera and GPS position."""
    image = Image.new("RGB", (320, 240), (30, 120, 200))
    exif = Image.Exif()
    exif[271] = "Conclave"
    exif[272] = "FieldCam 1"
    exif.get_ifd(0x8769)[36867] = "2024:05:17 09:30:15"
    gps = exif.get_ifd(0x8825)
    gps[1] = "N" if latitude >= 0 else "S"
    gps[2] = _dms(latitude)
    gps[3] = "E" if longitude >= 0 else "W"
    gps[4] = _dms(longitude)
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", exif=exif, quality=85)
    return buffer.getvalue()


def png(width: int = 64, height: int = 32) -> bytes:
    """A plain PNG."""
    buffer = io.BytesIO()
    Image.new("RGBA", (width, height), (10, 200, 10, 255)).save(buffer, "PNG")
    return buffer.getvalue()


def geotiff() -> bytes:
    """A 100x50 GeoTIFF in WGS 84 covering 10..11 E, 45..45.5 N."""
    info = TiffImagePlugin.ImageFileDirectory_v2()
    info[33550] = (0.01, 0.01, 0.0)
    info.tagtype[33550] = TiffTags.DOUBLE
    info[33922] = (0.0, 0.0, 0.0, 10.0, 45.5, 0.0)
    info.tagtype[33922] = TiffTags.DOUBLE
    info[34735] = (1, 1, 0, 2, 1024, 0, 1, 2, 2048, 0, 1, 4326)
    info.tagtype[34735] = TiffTags.SHORT
    buffer = io.BytesIO()
    Image.new("L", (100, 50), 128).save(buffer, "TIFF", tiffinfo=info)
    return buffer.getvalue()


def wav(seconds: float = 0.5, rate: int = 8000, channels: int = 1) -> bytes:
    """A silent 16-bit PCM WAV."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"\x00\x00" * channels * int(rate * seconds))
    return buffer.getvalue()


def pdf(pages: int = 2, text: str = "Field report") -> bytes:
    """A PDF whose pages each show ``text``."""
    writer = PdfWriter()
    for _ in range(pages):
        page = writer.add_blank_page(width=200, height=200)
        font = writer._add_object(_helvetica())  # pypdf has no public font helper
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
        )
        content = StreamObject()
        content.set_data(f"BT /F1 12 Tf 20 100 Td ({text}) Tj ET".encode())
        page[NameObject("/Contents")] = writer._add_object(content)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def _helvetica() -> DictionaryObject:
    """A Type1 Helvetica font dictionary (a standard PDF font, nothing embedded)."""
    return DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
        }
    )


def dxf() -> bytes:
    """A metric DXF R2010 drawing with two layers, two lines and a circle."""
    doc = ezdxf.new("R2010", units=6)
    doc.layers.add("WALLS")
    doc.layers.add("PIPES")
    msp = doc.modelspace()
    msp.add_line((0, 0), (10, 0), dxfattribs={"layer": "WALLS"})
    msp.add_line((10, 0), (10, 5), dxfattribs={"layer": "WALLS"})
    msp.add_circle((5, 2), 1, dxfattribs={"layer": "PIPES"})
    stream = io.StringIO()
    doc.write(stream)
    return stream.getvalue().encode()


def stl_binary(triangles: int = 2) -> bytes:
    """A binary STL with ``triangles`` zero triangles."""
    return b"\x00" * 80 + struct.pack("<I", triangles) + b"\x00" * 50 * triangles


def gpx() -> bytes:
    """A GPX track of three points and one waypoint."""
    points = "".join(
        f'<trkpt lat="{45 + i * 0.01}" lon="{7 + i * 0.01}"><time>2024-05-17T10:0{i}:00Z</time>'
        "</trkpt>"
        for i in range(3)
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<gpx version="1.1" creator="conclave-tests" xmlns="http://www.topografix.com/GPX/1/1">'
        '<wpt lat="45.0" lon="7.0"><name>start</name></wpt>'
        f"<trk><name>walk</name><trkseg>{points}</trkseg></trk></gpx>"
    ).encode()


def geojson() -> bytes:
    """A FeatureCollection with a point and a polygon."""
    return json.dumps(
        {
            "type": "FeatureCollection",
            "features": [
                {
                    "type": "Feature",
                    "properties": {},
                    "geometry": {"type": "Point", "coordinates": [2.0, 48.0]},
                },
                {
                    "type": "Feature",
                    "properties": {},
                    "geometry": {
                        "type": "Polygon",
                        "coordinates": [[[1.0, 47.0], [3.0, 47.0], [3.0, 49.0], [1.0, 47.0]]],
                    },
                },
            ],
        }
    ).encode()


def kml() -> bytes:
    """A KML document with two placemarks."""
    return (
        b'<?xml version="1.0" encoding="UTF-8"?><kml xmlns="http://www.opengis.net/kml/2.2">'
        b"<Document><Placemark><Point><coordinates>8.5,47.3,0</coordinates></Point></Placemark>"
        b"<Placemark><LineString><coordinates>8.0,47.0 9.0,48.0</coordinates></LineString>"
        b"</Placemark></Document></kml>"
    )


def kmz() -> bytes:
    """The KML above zipped as a KMZ."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("doc.kml", kml())
    return buffer.getvalue()


def mp4(frames: int = 10, rate: int = 10) -> bytes:
    """A 64x48 MPEG-4 (Part 2 video) clip of ``frames`` frames at ``rate`` fps: 1 s by default."""
    return clip("mp4", frames, rate)


def clip(container_format: str, frames: int = 10, rate: int = 10) -> bytes:
    """:func:`mp4`'s clip in another container (``matroska``, ``avi``, ...)."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=container_format) as container:
        stream = container.add_stream("mpeg4", rate=rate)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for index in range(frames):
            image = Image.new("RGB", (64, 48), (index * 20 % 256, 80, 160))
            container.mux(stream.encode(av.VideoFrame.from_image(image)))
        container.mux(stream.encode())  # flush the encoder's delayed frames
    return buffer.getvalue()
