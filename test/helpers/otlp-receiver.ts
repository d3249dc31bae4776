/**
 * A real OTLP/HTTP trace receiver on 127.0.0.1 (test fixture): it takes `POST /v1/traces` in the
 * protobuf encoding, decodes each ExportTraceServiceRequest with the protocol's schema
 * (otlp/trace.proto) and keeps the spans, flattened. It can hang (accept and never answer), as a
 * collector that is slow.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';

const root = protobuf.loadSync(fileURLToPath(new URL('./otlp/trace.proto', import.meta.url)));
const ExportTraceServiceRequest = root.lookupType('opentelemetry.proto.ExportTraceServiceRequest');

export const SPAN_KIND = { internal: 1, server: 2, client: 3 } as const;
export const STATUS_ERROR = 2;

type AttributeValue = string | number | boolean | null;

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  traceState: string;
  name: string;
  kind: number;
  startNs: bigint;
  endNs: bigint;
  attributes: Record<string, AttributeValue>;
  statusCode: number;
  resource: Record<string, AttributeValue>;
}

export interface OtlpReceiver {
  /** http://127.0.0.1:<port>/v1/traces */
  readonly url: string;
  readonly spans: ReceivedSpan[];
  /** Export requests received (answered or hanging). */
  readonly requests: number;
  /** Accept requests and never answer them (true), or answer at once (false, the default). */
  hang(on: boolean): void;
  close(): Promise<void>;
}

interface DecodedKeyValue {
  key: string;
  value?: { stringValue?: string; boolValue?: boolean; intValue?: string; doubleValue?: number };
}

function attributes(list: DecodedKeyValue[] | undefined): Record<string, AttributeValue> {
  const out: Record<string, AttributeValue> = {};
  for (const kv of list ?? []) {
    const v = kv.value ?? {};
    out[kv.key] = v.stringValue ?? v.boolValue ?? (v.intValue !== undefined ? Number(v.intValue) : undefined) ?? v.doubleValue ?? null;
  }
  return out;
}

const hex = (b: Uint8Array | undefined): string => (b ? Buffer.from(b).toString('hex') : '');

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  let requests = 0;
  let hanging = false;
  const held: ServerResponse[] = [];

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      requests++;
      if (req.method !== 'POST' || req.url !== '/v1/traces' || req.headers['content-type'] !== 'application/x-protobuf') {
        res.writeHead(400).end();
        return;
      }
      if (hanging) {
        held.push(res);
        return;
      }
      const decoded = ExportTraceServiceRequest.toObject(ExportTraceServiceRequest.decode(Buffer.concat(chunks)), {
        longs: String,
        enums: Number,
        bytes: Array,
      }) as {
        resourceSpans?: { resource?: { attributes?: DecodedKeyValue[] }; scopeSpans?: { spans?: Record<string, unknown>[] }[] }[];
      };
      for (const rs of decoded.resourceSpans ?? []) {
        const resource = attributes(rs.resource?.attributes);
        for (const ss of rs.scopeSpans ?? []) {
          for (const s of ss.spans ?? []) {
            spans.push({
              traceId: hex(s.traceId as Uint8Array),
              spanId: hex(s.spanId as Uint8Array),
              parentSpanId: hex(s.parentSpanId as Uint8Array | undefined),
              traceState: (s.traceState as string | undefined) ?? '',
              name: s.name as string,
              kind: (s.kind as number | undefined) ?? 0,
              startNs: BigInt(s.startTimeUnixNano as string),
              endNs: BigInt(s.endTimeUnixNano as string),
              attributes: attributes(s.attributes as DecodedKeyValue[] | undefined),
              statusCode: (s.status as { code?: number } | undefined)?.code ?? 0,
              resource,
            });
          }
        }
      }
      // An empty ExportTraceServiceResponse: everything accepted.
      res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1/traces`,
    spans,
    get requests() {
      return requests;
    },
    hang(on) {
      hanging = on;
    },
    async close() {
      for (const res of held) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
