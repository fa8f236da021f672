package main

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Partitioner is Kafka's Java client's default: a keyed record goes to
// toPositive(murmur2(key)) % partitions (franz-go's default too; nil hasher = Kafka's murmur2).
// Never a CRC32 or FNV hasher (librdkafka's and Sarama's defaults) and never a partition
// chosen by hand: convlog reads a conversation from its key's murmur2 partition only.
func Partitioner() kgo.Partitioner {
	return kgo.UniformBytesPartitioner(64<<10, true, true, nil)
}

var codecs = map[string]kgo.CompressionCodec{
	"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
	"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
}

// ClientOptions are the contract's safe producer settings: acks=all, idempotence (franz-go's
// default; never kgo.DisableIdempotentWrite), the murmur2 partitioner, compression on (convlog
// reads every standard codec).
func ClientOptions(bootstrap, compression string) ([]kgo.Opt, error) {
	codec, ok := codecs[compression]
	if !ok {
		return nil, fmt.Errorf("unknown compression %q (none, gzip, snappy, lz4, zstd)", compression)
	}
	return []kgo.Opt{
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.ClientID("convlog-go-example"),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(Partitioner()),
		kgo.ProducerBatchCompression(codec),
		// Let convlog create the topic with its settings (docs/producers.md, "The topic"):
		// franz-go never asks the broker to auto-create one unless told to.
	}, nil
}
