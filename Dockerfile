# The voice agent as a container: `docker build -t voice-agent .` then
#   docker run --rm -p 8765:8765 -v "$PWD/my-kb:/kb:ro" voice-agent serve --kb /kb --host 0.0.0.0
# Models arrive inside pip packages at build time; nothing is fetched from a model hub at run time.
FROM python:3.11-slim-bookworm

# espeak-ng: piper's phonemizer data; libportaudio2: sounddevice (mic); libgomp1: onnxruntime/ctranslate2
RUN apt-get update \
 && apt-get install -y --no-install-recommends espeak-ng libportaudio2 libgomp1 \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md LICENSE run.py ./
COPY kb ./kb
COPY policy ./policy
COPY voice_agent ./voice_agent
COPY evaluation ./evaluation
RUN pip install --no-cache-dir '.[postgres,rehear-asr]' \
 && useradd --create-home --uid 10001 agent
COPY fixtures/kb /app/sample-kb

ENV HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
USER agent
WORKDIR /home/agent
# The sample KB's embedding cache is written on first use; state (audit, handoffs) under ./var.
RUN voice-agent ask --kb /app/sample-kb --state-dir /tmp/warm "How do I set up voicemail?" > /dev/null
EXPOSE 8765
HEALTHCHECK --interval=30s --timeout=5s CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8765/livez', timeout=4).status == 200 else 1)"
ENTRYPOINT ["voice-agent"]
CMD ["serve", "--kb", "/app/sample-kb", "--host", "0.0.0.0", "--port", "8765"]
