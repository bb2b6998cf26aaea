// Copyright (C) 2026 The memq authors. Licensed under the Apache License, Version 2.0.
//
// memq's Perfetto UI plugin: when a trace with memq memory events is opened it adds a "memq"
// track group (device bytes over all GPUs, copies by direction, duplicated bytes when the memq
// SQL package is available and the trace is not annotated yet) and commands that run the memq
// analyses and show their tables, pins the summary tracks `memq open` pins, and shows times as
// wall-clock time unless the user chose another format.
//
// Written against the plugin API of Perfetto v55 (ui/src/public/*: PerfettoPlugin, Trace,
// TrackNode; SliceTrack + SourceDataset, CounterTrack.create with sqlSource; QueryPage's
// addQueryResultsTab). See ../README.md for the pinned tag and the build steps.

import type {PerfettoPlugin} from '../../public/plugin';
import type {Trace} from '../../public/trace';
import {TrackNode} from '../../public/workspace';
import {CounterTrack} from '../../components/tracks/counter_track';
import {SliceTrack} from '../../components/tracks/slice_track';
import {SourceDataset} from '../../trace_processor/dataset';
import {LONG, NUM, STR} from '../../trace_processor/query_result';
import {TimestampFormat} from '../../public/timeline';
import QueryPagePlugin from '../dev.perfetto.QueryPage';
// Names of the trace format, generated from ctf2perfetto/traceformat (python3 -m ctf2perfetto.traceformat.ui).
import {
  ARG_BYTES_FMT, CAT_COPY, CAT_SET, DEVICE_COUNTER_GLOB, DUPLICATED_TRACK, MEMQ_CATEGORIES, PIN_PATTERN,
  TIMESTAMP_FORMAT,
} from './memq_names';

const PINNED_TRACKS = new RegExp(PIN_PATTERN);

// One command per analysis: the memq module to include and the table to show.
const ANALYSES: ReadonlyArray<{verb: string; title: string; module: string; query: string}> = [
  {verb: 'ShowDuplicated', title: 'memq: duplicated bytes (peak, mean) per grouping',
   module: 'memq.duplicated',
   query: 'SELECT grouping, upid, key, peak_bytes, peak_ts, mean_bytes FROM memq_duplicated_group'},
  {verb: 'ShowRedundant', title: 'memq: redundant copies per class',
   module: 'memq.redundant', query: "SELECT * FROM memq_redundant_total('auto')"},
  {verb: 'ShowRedundantCopies', title: 'memq: redundant copies, one row per copy',
   module: 'memq.redundant',
   query: "SELECT * FROM memq_redundant_copy('auto') WHERE redundant_bytes > 0 ORDER BY redundant_dur DESC"},
  {verb: 'ShowLeaks', title: 'memq: leaked allocations by kind and size',
   module: 'memq.leaks', query: 'SELECT * FROM memq_leak_by_kind_size'},
  {verb: 'ShowCopies', title: 'memq: copies per direction',
   module: 'memq.summary', query: 'SELECT * FROM memq_summary_copy'},
];

export default class MemQ implements PerfettoPlugin {
  static readonly id = 'com.memq.MemQ';
  static readonly description =
    'memq: GPU/host memory tracks, duplicated bytes and redundant-copy analyses.';
  static readonly dependencies = [QueryPagePlugin];

  async onTraceLoad(trace: Trace): Promise<void> {
    if ((await count(trace, `SELECT COUNT(*) AS n FROM slice WHERE category IN ${MEMQ_CATEGORIES}`)) === 0) {
      return; // not a memq trace: add nothing
    }
    // The memq SQL package is there when trace_processor runs natively with
    // --add-sql-package (memq open --trace-processor) or the UI registered it.
    const hasPackage = (await trace.engine.tryQuery('INCLUDE PERFETTO MODULE memq.duplicated')).ok;
    const annotated = (await count(trace,
      `SELECT COUNT(*) AS n FROM counter_track WHERE name = '${DUPLICATED_TRACK}'`)) > 0;
    // The trace's clock is REALTIME: wall-clock time reads better than the default timecode (days since 1970).
    const wallClock = Object.values(TimestampFormat).find((f) => f === TIMESTAMP_FORMAT);
    if (wallClock !== undefined && trace.timeline.timestampFormat === TimestampFormat.Timecode) {
      trace.timeline.timestampFormat = wallClock;
    }

    const group = new TrackNode({name: 'memq', isSummary: true});
    trace.workspace.addChildFirst(group);

    addCounter(trace, group, 'DeviceBytes', 'memq: device live bytes, all GPUs', `
      SELECT ts, SUM(delta) OVER (ORDER BY ts, id ROWS UNBOUNDED PRECEDING) AS value FROM (
        SELECT c.id, c.ts, c.value - COALESCE(LAG(c.value) OVER (
          PARTITION BY c.track_id ORDER BY c.ts, c.id), 0) AS delta
        FROM counter c JOIN counter_track t ON c.track_id = t.id
        WHERE t.name GLOB '${DEVICE_COUNTER_GLOB}')`);
    if (hasPackage && !annotated) {
      addCounter(trace, group, 'Duplicated', 'memq: duplicated bytes (upper bound)',
        "SELECT ts, value FROM memq_duplicated_counter WHERE grouping = 'total' AND upid IS NULL");
    }
    const uri = `${trace.pluginId}#Copies`;
    trace.tracks.registerTrack({
      uri,
      description: 'Every copy and memset (memq.copy / memq.set), laid out by overlap.',
      renderer: SliceTrack.create({trace, uri, dataset: new SourceDataset({
        src: `SELECT id, ts, dur, name || ' ' || IFNULL(EXTRACT_ARG(arg_set_id, '${ARG_BYTES_FMT}'), '') AS name
              FROM slice WHERE category IN ('${CAT_COPY}', '${CAT_SET}')`,
        schema: {id: NUM, ts: LONG, dur: LONG, name: STR},
      })}),
    });
    group.addChildLast(new TrackNode({uri, name: 'memq: copies and memsets'}));
    group.expand();

    const pin = () => trace.workspace.flatTracks.filter((t) => PINNED_TRACKS.test(t.name)).forEach((t) => t.pin());
    pin();
    trace.commands.registerCommand({id: `${trace.pluginId}#PinMemoryTracks`, name: 'memq: pin memory tracks',
      callback: pin});
    for (const a of ANALYSES) {
      trace.commands.registerCommand({
        id: `${trace.pluginId}#${a.verb}`,
        name: `${a.title}${hasPackage ? '' : ' (needs the memq SQL package: memq open --trace-processor)'}`,
        callback: () => trace.plugins.getPlugin(QueryPagePlugin).addQueryResultsTab({
          query: `INCLUDE PERFETTO MODULE ${a.module};\n${a.query}`, title: a.title}),
      });
    }
  }
}

function addCounter(trace: Trace, group: TrackNode, key: string, name: string, sqlSource: string) {
  const uri = `${trace.pluginId}#${key}`;
  trace.tracks.registerTrack({uri, renderer: CounterTrack.create({trace, uri, sqlSource, unit: 'B'})});
  group.addChildLast(new TrackNode({uri, name}));
}

async function count(trace: Trace, sql: string): Promise<number> {
  const result = await trace.engine.query(sql);
  return result.firstRow({n: NUM}).n;
}
