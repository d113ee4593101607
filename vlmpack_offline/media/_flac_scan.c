/* The two passes over every byte that an exact FLAC count needs (flac_walk.py), compiled.

   numpy's compares cost several passes over the file for the 0xFFF8/9 sync search, and each CRC-16 through ctypes
   costs a foreign call per frame: together more than the scan's budget for a clip (docs/performance.md, "Audio
   probing"). Here the search is memchr for 0xFF then a look at the next byte, and the CRC-16s are libavutil's own
   av_crc (the function flac_walk loads through ctypes, handed in by address), all spans in one call. Optional:
   where no C compiler built this module, flac_walk runs the same passes in numpy and ctypes, with the same answers
   (tests/test_audio_walk.py holds both to PyAV's decoder). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { HEADER = 16, FIELDS = 7 }; /* MAX_FRAME_HEADER_SIZE; the int64 fields of a candidate (below) */

static const int block_sizes[16] = {0, 192, 576, 1152, 2304, 4608, 0, 0, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
static const int rates[16] = {0, 88200, 176400, 192000, 8000, 16000, 22050, 24000, 32000, 44100, 48000, 96000};
static const int sample_bits[8] = {0, 8, 12, 0, 16, 20, 24, 32};

static int utf8_width(unsigned char first) /* a frame number's bytes from its first (0: GET_UTF8 refuses it) */
{
    return first < 0x80 ? 1 : first < 0xC0 ? 0 : first < 0xE0 ? 2 : first < 0xF0 ? 3 : first < 0xF8 ? 4
         : first < 0xFC ? 5 : first < 0xFE ? 6 : 0;
}

static unsigned char crc8(const unsigned char *bytes, int length) /* AV_CRC_8_ATM: polynomial 0x07, MSB first, 0 */
{
    unsigned char crc = 0;
    for (int i = 0; i < length; i++) {
        crc ^= bytes[i];
        for (int bit = 0; bit < 8; bit++)
            crc = crc & 0x80 ? (unsigned char)((crc << 1) ^ 0x07) : (unsigned char)(crc << 1);
    }
    return crc;
}

/* The header at head (HEADER bytes, zeros past the file's end) as ff_flac_decode_frame_header reads it: 0 where it
   refuses it, else 1 with out = {number, block size, variable-block-size bit, rate, sample bits, channels} (rate and
   bits 0: "from STREAMINFO"). The same rules as flac_walk._candidates, one header at a time. */
static int decode_header(const unsigned char *head, int64_t out[FIELDS - 1])
{
    const int block_code = head[2] >> 4, rate_code = head[2] & 15;
    const int mode = head[3] >> 4, bits_code = (head[3] >> 1) & 7;
    const int width = utf8_width(head[4]);
    if (!block_code || rate_code == 15 || mode >= 11 || bits_code == 3 || head[3] & 1 || !width)
        return 0;
    static const int value_mask[7] = {0, 0x7F, 0x1F, 0x0F, 0x07, 0x03, 0x01};
    int64_t number = head[4] & value_mask[width];
    for (int k = 1; k < width; k++) {
        if ((head[4 + k] & 0xC0) != 0x80)
            return 0;
        number = number << 6 | (head[4 + k] & 0x3F);
    }
    int end = 4 + width; /* the byte after the frame number */
    int64_t block = block_sizes[block_code];
    if (block_code == 6)
        block = head[end] + 1;
    else if (block_code == 7)
        block = (head[end] << 8 | head[end + 1]) + 1;
    end += block_code == 6 ? 1 : block_code == 7 ? 2 : 0;
    int64_t rate = rate_code < 12 ? rates[rate_code] : 0;
    if (rate_code == 12)
        rate = head[end] * 1000;
    else if (rate_code == 13)
        rate = head[end] << 8 | head[end + 1];
    else if (rate_code == 14)
        rate = (head[end] << 8 | head[end + 1]) * 10;
    end += rate_code == 12 ? 1 : rate_code >= 13 ? 2 : 0; /* the CRC-8 byte: at most 4 + 6 + 2 + 2 < HEADER */
    if (crc8(head, end + 1))
        return 0;
    out[0] = number;
    out[1] = block;
    out[2] = head[1] & 1;
    out[3] = rate;
    out[4] = sample_bits[bits_code];
    out[5] = mode < 8 ? mode + 1 : 2;
    return 1;
}

/* candidates(data, start, limit) -> bytes of native int64, FIELDS per candidate: {offset, number, block size,
   variable-block-size bit, rate, sample bits, channels} for every offset from start where data reads 0xFF then 0xF8
   or 0xF9 (the pair inside data) and the header there decodes (decode_header), ascending; None once more than limit
   offsets read so (flac_walk declines: a hostile file costs bounded time and memory). */
static PyObject *candidates(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, limit;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &start, &limit))
        return NULL;
    const unsigned char *data = view.buf;
    const Py_ssize_t size = view.len;
    int64_t *found = NULL;
    Py_ssize_t syncs = 0, count = 0, capacity = 0;
    int over = 0, no_memory = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t at = start < 0 ? 0 : start; at < size - 1; at++) {
        const unsigned char *hit = memchr(data + at, 0xFF, (size_t)(size - 1 - at));
        if (hit == NULL)
            break;
        at = hit - data;
        if ((data[at + 1] | 1) != 0xF9)
            continue;
        if (++syncs > limit) {
            over = 1;
            break;
        }
        unsigned char head[HEADER] = {0};
        memcpy(head, data + at, (size_t)(size - at < HEADER ? size - at : HEADER));
        int64_t fields[FIELDS - 1];
        if (!decode_header(head, fields))
            continue;
        if (count == capacity) {
            Py_ssize_t grown = capacity ? 2 * capacity : 256;
            int64_t *more = realloc(found, (size_t)(grown * FIELDS) * sizeof *found);
            if (more == NULL) {
                no_memory = 1;
                break;
            }
            found = more;
            capacity = grown;
        }
        found[count * FIELDS] = at;
        memcpy(found + count * FIELDS + 1, fields, sizeof fields);
        count++;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *result;
    if (no_memory)
        result = PyErr_NoMemory();
    else if (over)
        result = Py_NewRef(Py_None);
    else
        result = PyBytes_FromStringAndSize((const char *)found, count * FIELDS * (Py_ssize_t)sizeof *found);
    free(found);
    return result;
}

typedef uint32_t (*av_crc_function)(const void *table, uint32_t crc, const uint8_t *buffer, size_t length);

/* crc_spans(data, starts, ends, av_crc, table) -> bytes of native uint32: av_crc(table, 0, data + start, end - start)
   per span; starts and ends are buffers of native int64 of one length, every span inside data (ValueError
   otherwise, before any call); av_crc and table are addresses (flac_walk._load_crc16 checks them first). */
static PyObject *crc_spans(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer data, starts, ends;
    unsigned long long function, table;
    if (!PyArg_ParseTuple(args, "y*y*y*KK", &data, &starts, &ends, &function, &table))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t count = starts.len / (Py_ssize_t)sizeof(int64_t);
    if (starts.len != ends.len || starts.len % (Py_ssize_t)sizeof(int64_t) || !function || !table) {
        PyErr_SetString(PyExc_ValueError, "crc_spans: starts and ends must be int64 buffers of one length");
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t start, end;
        memcpy(&start, (const char *)starts.buf + i * sizeof start, sizeof start);
        memcpy(&end, (const char *)ends.buf + i * sizeof end, sizeof end);
        if (start < 0 || start > end || end > data.len) {
            PyErr_SetString(PyExc_ValueError, "crc_spans: a span outside the data");
            goto done;
        }
    }
    result = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(uint32_t));
    if (result == NULL)
        goto done;
    {
        const av_crc_function crc = (av_crc_function)(uintptr_t)function;
        const void *crc_table = (const void *)(uintptr_t)table;
        const uint8_t *base = data.buf;
        char *out = PyBytes_AS_STRING(result);
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < count; i++) {
            int64_t start, end;
            memcpy(&start, (const char *)starts.buf + i * sizeof start, sizeof start);
            memcpy(&end, (const char *)ends.buf + i * sizeof end, sizeof end);
            const uint32_t value = crc(crc_table, 0, base + start, (size_t)(end - start));
            memcpy(out + i * sizeof value, &value, sizeof value);
        }
        Py_END_ALLOW_THREADS
    }
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&ends);
    return result;
}

static PyMethodDef methods[] = {
    {"candidates", candidates, METH_VARARGS, "candidates(data, start, limit): the decoded candidate headers"},
    {"crc_spans", crc_spans, METH_VARARGS, "crc_spans(data, starts, ends, av_crc, table): av_crc per span, uint32 bytes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT, .m_name = "_flac_scan", .m_size = 0, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__flac_scan(void)
{
    return PyModule_Create(&module);
}
