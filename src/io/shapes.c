/* shapes.c — a procedural dataset of 28x28 grayscale shapes in 10 classes.
 *
 * It exists so that training works on a machine with no dataset installed, and so that
 * tests have data of any size on demand. Each image is drawn from a signed distance
 * function (negative inside the shape), which gives antialiased edges and outlines of any
 * thickness from one formula. Position, size, rotation, stroke width, contrast, pixel
 * noise and an occasional stray dot vary, so a linear model does poorly but a small CNN
 * learns it well; small shapes with thick strokes are genuinely ambiguous (a ring vs a
 * disc), which keeps it from being trivial.
 *
 * Example i is drawn from Philox counters (i, k) under the seed alone, so it does not
 * depend on n: a dataset of 1000 is the first 1000 of a dataset of 10000. Labels cycle
 * i % 10, which balances the classes exactly. */
#include "opdef.h"
#include "gradus_classifier.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SHAPES_SIZE 28
#define SHAPES_CLASSES 10
#define PI_F 3.14159265358979f

enum {
    DISC, RING, SQUARE, SQUARE_OUTLINE, TRIANGLE, TRIANGLE_OUTLINE, PLUS, CROSS, HBAR, VBAR
};

/* A stream of uniforms for one image: counter (image, block) under the seed. */
typedef struct draw {
    uint64_t seed, image, block;
    uint32_t v[4];
    int used;
} draw;

static float u01(draw *d)
{
    if (d->used == 4) {
        gdp_philox_out o = gdp_philox4x32(d->image, d->block++, d->seed);
        memcpy(d->v, o.v, sizeof d->v);
        d->used = 0;
    }
    return gdp_u01(d->v[d->used++]);
}

static float uniform(draw *d, float lo, float hi) { return lo + (hi - lo) * u01(d); }

static float clampf(float x, float lo, float hi) { return x < lo ? lo : x > hi ? hi : x; }

/* Distance to an axis-aligned box of half-extents (bx, by) centred at the origin. */
static float box(float x, float y, float bx, float by)
{
    float qx = fabsf(x) - bx, qy = fabsf(y) - by;
    float ox = qx > 0 ? qx : 0, oy = qy > 0 ? qy : 0;
    float inside = qx > qy ? qx : qy;
    return sqrtf(ox * ox + oy * oy) + (inside < 0 ? inside : 0);
}

/* Equilateral triangle, apex up (image y grows downwards), circumradius r: the largest
 * signed distance to its three edge lines, which lie r/2 from the centre. Exact inside
 * and along the edges, rounded-off near the corners outside; fine for drawing. */
static float triangle(float x, float y, float r)
{
    float d = -1e9f;
    for (int k = 0; k < 3; k++) {
        float a = PI_F / 2 + (float)k * 2 * PI_F / 3;
        float e = x * cosf(a) + y * sinf(a) - r / 2;
        if (e > d) d = e;
    }
    return d;
}

typedef struct shape {
    int kind;
    float cx, cy, size, angle, stroke; /* stroke: full width of outlines and bars */
} shape;

/* Signed distance (pixels) from point (x, y) to the shape's edge, negative inside. */
static float shape_sdf(const shape *s, float x, float y)
{
    float dx = x - s->cx, dy = y - s->cy;
    float c = cosf(s->angle), sn = sinf(s->angle);
    float px = c * dx + sn * dy, py = -sn * dx + c * dy; /* into the shape's own frame */
    float r = s->size, h = s->stroke / 2;
    switch (s->kind) {
    case DISC: return sqrtf(px * px + py * py) - r;
    case RING: return fabsf(sqrtf(px * px + py * py) - r) - h;
    case SQUARE: return box(px, py, r * 0.85f, r * 0.85f);
    case SQUARE_OUTLINE: return fabsf(box(px, py, r * 0.85f, r * 0.85f)) - h;
    case TRIANGLE: return triangle(px, py, r * 1.1f);
    case TRIANGLE_OUTLINE: return fabsf(triangle(px, py, r * 1.1f)) - h;
    case PLUS: {
        float a = box(px, py, r, h), b = box(px, py, h, r);
        return a < b ? a : b;
    }
    case CROSS: {
        float qx = (px + py) * 0.70710678f, qy = (py - px) * 0.70710678f;
        float a = box(qx, qy, r, h), b = box(qx, qy, h, r);
        return a < b ? a : b;
    }
    case HBAR: return box(px, py, r, h);
    default: return box(px, py, h, r); /* VBAR */
    }
}

static void draw_image(uint64_t seed, uint64_t i, int label, float *img)
{
    draw d = {seed, i, 0, {0}, 4};
    shape s;
    s.kind = label;
    s.size = uniform(&d, 5.5f, 11.0f);
    s.stroke = uniform(&d, 1.4f, 3.2f);
    if (s.kind == HBAR || s.kind == VBAR) s.size = uniform(&d, 6.5f, 11.5f);
    if (s.kind == PLUS || s.kind == CROSS) s.size = uniform(&d, 5.5f, 11.0f);
    /* Up to +-14 degrees: bars stay horizontal or vertical, and a plus stays 16 degrees
     * or more from any cross (a plus turned 22.5 degrees is a cross turned -22.5). */
    s.angle = uniform(&d, -0.25f, 0.25f);
    /* Keep the shape's bounding circle inside the frame with a pixel to spare. */
    float reach = s.size * 1.15f + 1.0f, lo = reach, hi = SHAPES_SIZE - reach;
    if (hi < lo) lo = hi = SHAPES_SIZE / 2.0f;
    s.cx = uniform(&d, lo, hi);
    s.cy = uniform(&d, lo, hi);
    float bg = uniform(&d, 0.0f, 0.25f), fg = uniform(&d, 0.55f, 1.0f), sigma = uniform(&d, 0.02f, 0.10f);
    /* A stray dot in a quarter of the images, anywhere in the frame. */
    int dot = u01(&d) < 0.25f;
    float dot_x = uniform(&d, 3, SHAPES_SIZE - 3), dot_y = uniform(&d, 3, SHAPES_SIZE - 3);
    float dot_r = uniform(&d, 0.7f, 1.6f);

    /* Pixel noise from its own counters, four Gaussians per Philox block (Box-Muller). */
    draw noise = {seed, i, 1u << 20, {0}, 4};
    for (int y = 0; y < SHAPES_SIZE; y++) {
        for (int x = 0; x < SHAPES_SIZE; x += 2) {
            float u1 = u01(&noise), u2 = u01(&noise);
            float rad = sqrtf(-2.0f * logf(u1));
            float g[2] = {rad * cosf(2 * PI_F * u2), rad * sinf(2 * PI_F * u2)};
            for (int k = 0; k < 2; k++) {
                float px = (float)(x + k) + 0.5f, py = (float)y + 0.5f;
                /* Coverage of a one-pixel footprint by the shape: an antialiased edge. */
                float cover = clampf(0.5f - shape_sdf(&s, px, py), 0, 1);
                if (dot) {
                    float ddx = px - dot_x, ddy = py - dot_y;
                    float dc = clampf(0.5f - (sqrtf(ddx * ddx + ddy * ddy) - dot_r), 0, 1);
                    if (dc > cover) cover = dc;
                }
                img[y * SHAPES_SIZE + x + k] = clampf(bg + (fg - bg) * cover + sigma * g[k], 0, 1);
            }
        }
    }
}

gd_status gd_dataset_shapes(gd_ctx *ctx, int64_t n, uint64_t seed, gd_dataset *out)
{
    if (out == NULL) return ctx ? gd_fail(ctx, GD_ERR_INVALID, "gd_dataset_shapes: out is NULL") : GD_ERR_INVALID;
    memset(out, 0, sizeof *out);
    if (n <= 0 || n > ((int64_t)1 << 40) / (SHAPES_SIZE * SHAPES_SIZE))
        return ctx ? gd_fail(ctx, GD_ERR_INVALID, "gd_dataset_shapes: n = %lld examples is out of range", (long long)n)
                   : GD_ERR_INVALID;
    size_t pix = (size_t)SHAPES_SIZE * SHAPES_SIZE;
    out->images = malloc((size_t)n * pix * sizeof(float));
    out->labels = malloc((size_t)n * sizeof(int32_t));
    if (out->images == NULL || out->labels == NULL) {
        gd_dataset_free(out);
        return ctx ? gd_fail(ctx, GD_ERR_NOMEM, "gd_dataset_shapes: out of memory for %lld images", (long long)n)
                   : GD_ERR_NOMEM;
    }
    for (int64_t i = 0; i < n; i++) {
        int label = (int)(i % SHAPES_CLASSES);
        out->labels[i] = label;
        draw_image(seed, (uint64_t)i, label, out->images + (size_t)i * pix);
    }
    out->n = n;
    out->h = out->w = SHAPES_SIZE;
    out->classes = SHAPES_CLASSES;
    return GD_OK;
}
