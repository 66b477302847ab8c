package postgres

import (
	"encoding/binary"

	"github.com/jackc/pgx/v5/pgtype"
)

// registerArrayEncoders makes m encode the slices a statement sends
// ([]string, []int64, []int32, []int16, []bool) as PostgreSQL arrays of the
// matching type straight into the message. pgx's generic path boxes every
// element in an interface on its way out (an allocation for each string and
// each number above 255) and picks an encode plan per element: about a third
// of the store's own CPU per statement. Anything else, and decoding, is left
// to the codecs m had.
func registerArrayEncoders(m *pgtype.Map) {
	register(m, pgtype.TextArrayOID, pgtype.TextOID, func(b []byte, v string) []byte {
		return append(binary.BigEndian.AppendUint32(b, uint32(len(v))), v...)
	})
	register(m, pgtype.Int8ArrayOID, pgtype.Int8OID, func(b []byte, v int64) []byte {
		return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(b, 8), uint64(v))
	})
	register(m, pgtype.Int4ArrayOID, pgtype.Int4OID, func(b []byte, v int32) []byte {
		return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(b, 4), uint32(v))
	})
	register(m, pgtype.Int2ArrayOID, pgtype.Int2OID, func(b []byte, v int16) []byte {
		return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint32(b, 2), uint16(v))
	})
	register(m, pgtype.BoolArrayOID, pgtype.BoolOID, func(b []byte, v bool) []byte {
		b = binary.BigEndian.AppendUint32(b, 1)
		if v {
			return append(b, 1)
		}
		return append(b, 0)
	})
}

func register[T any](m *pgtype.Map, oid, elem uint32, put func([]byte, T) []byte) {
	t, ok := m.TypeForOID(oid)
	if !ok {
		return
	}
	m.RegisterType(&pgtype.Type{Name: t.Name, OID: oid, Codec: &sliceCodec[T]{Codec: t.Codec, elem: elem, put: put}})
}

// sliceCodec is a pgtype.Codec that encodes a []T in binary itself and
// hands every other value, and all decoding, to the codec it wraps.
type sliceCodec[T any] struct {
	pgtype.Codec
	elem uint32                 // the element type's OID
	put  func([]byte, T) []byte // appends one element: its length, then its bytes
}

func (c *sliceCodec[T]) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.([]T); ok && format == pgtype.BinaryFormatCode {
		return (*sliceEncodePlan[T])(c)
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

type sliceEncodePlan[T any] sliceCodec[T]

// Encode writes PostgreSQL's binary array format: the number of
// dimensions, a flag for NULL elements (none), the element type, and for
// the one dimension its length and lower bound (1), then each element. A
// nil slice is NULL; an empty one has no dimension.
func (p *sliceEncodePlan[T]) Encode(value any, buf []byte) ([]byte, error) {
	s := value.([]T)
	if s == nil {
		return nil, nil
	}
	if len(s) == 0 {
		buf = binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(buf, 0), 0)
		return binary.BigEndian.AppendUint32(buf, p.elem), nil
	}
	buf = binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(buf, 1), 0)
	buf = binary.BigEndian.AppendUint32(buf, p.elem)
	buf = binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(buf, uint32(len(s))), 1)
	for _, v := range s {
		buf = p.put(buf, v)
	}
	return buf, nil
}
