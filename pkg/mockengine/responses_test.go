package mockengine

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

func TestSDKResponsesNonStreaming(t *testing.T) {
	_, url := startServer(t, fastConfig())
	c := sdk(url)
	resp, err := c.Responses.New(t.Context(), responses.ResponseNewParams{
		Model:           "any-model-name",
		Instructions:    openai.String(longSystem),
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		MaxOutputTokens: openai.Int(5),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(resp.ID, "resp-mock-0-") || resp.Status != "completed" || resp.Model != "any-model-name" || string(resp.Object) != "response" {
		t.Fatalf("response = %+v", resp)
	}
	if len(resp.Output) != 1 || resp.Output[0].Type != "message" || resp.Output[0].Role != "assistant" {
		t.Fatalf("output = %+v", resp.Output)
	}
	msg := resp.Output[0].AsMessage()
	if len(msg.Content) != 1 || msg.Content[0].Type != "output_text" || msg.Content[0].Text != resp.OutputText() {
		t.Fatalf("message = %+v", msg)
	}
	if got := len(strings.Fields(resp.OutputText())); got != 5 {
		t.Fatalf("text %q has %d words, want 5 (max_output_tokens)", resp.OutputText(), got)
	}
	// "system:<longSystem>\nuser:hi\n" at 4 bytes per token.
	wantIn := int64(len("system:"+longSystem+"\nuser:hi\n")+3) / 4
	u := resp.Usage
	if u.InputTokens != wantIn || u.OutputTokens != 5 || u.TotalTokens != wantIn+5 || u.InputTokensDetails.CachedTokens != 0 {
		t.Fatalf("usage = %+v, want input %d output 5", u, wantIn)
	}
}

func TestSDKResponsesStreamingTwoTurnCache(t *testing.T) {
	e, url := startServer(t, fastConfig())
	c := sdk(url)
	input := responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("first question", responses.EasyInputMessageRoleUser),
	}
	type turnResult struct {
		events []string
		deltas string
		final  responses.Response
	}
	turn := func() turnResult {
		stream := c.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{
			Model:        "test-model",
			Instructions: openai.String(longSystem),
			Input:        responses.ResponseNewParamsInputUnion{OfInputItemList: input},
		})
		defer stream.Close()
		var res turnResult
		var deltas strings.Builder
		for stream.Next() {
			ev := stream.Current()
			res.events = append(res.events, ev.Type)
			switch ev.Type {
			case "response.created":
				if ev.Response.Status != "in_progress" || len(ev.Response.Output) != 0 {
					t.Fatalf("created event %s", ev.RawJSON())
				}
			case "response.output_text.delta":
				if ev.OutputIndex != 0 || ev.ContentIndex != 0 || ev.Delta == "" {
					t.Fatalf("delta event %s", ev.RawJSON())
				}
				deltas.WriteString(ev.Delta)
			case "response.completed":
				res.final = ev.Response
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		res.deltas = deltas.String()
		return res
	}

	r1 := turn()
	want := []string{"response.created"}
	for range 8 {
		want = append(want, "response.output_text.delta")
	}
	want = append(want, "response.completed")
	if strings.Join(r1.events, ",") != strings.Join(want, ",") {
		t.Fatalf("events %v, want %v", r1.events, want)
	}
	if r1.final.Status != "completed" || r1.final.OutputText() != r1.deltas || r1.deltas == "" {
		t.Fatalf("completed text %q, deltas %q, status %q", r1.final.OutputText(), r1.deltas, r1.final.Status)
	}
	u1 := r1.final.Usage
	if u1.OutputTokens != 8 || u1.InputTokens < 100 || u1.TotalTokens != u1.InputTokens+8 || u1.InputTokensDetails.CachedTokens != 0 {
		t.Fatalf("turn 1 usage %+v", u1)
	}

	// Turn 2 re-sends turn 1's output message as the SDK hands it back.
	input = append(input,
		responses.ResponseInputItemUnionParam{OfOutputMessage: new(r1.final.Output[0].AsMessage().ToParam())},
		responses.ResponseInputItemParamOfMessage("second question", responses.EasyInputMessageRoleUser))
	r2 := turn()
	u2 := r2.final.Usage
	if u2.InputTokensDetails.CachedTokens <= u1.InputTokens-16 {
		t.Fatalf("turn 2 cached %d tokens, want more than turn 1's input minus its tail (%d)", u2.InputTokensDetails.CachedTokens, u1.InputTokens-16)
	}
	if u2.InputTokensDetails.CachedTokens > u2.InputTokens {
		t.Fatalf("cached %d > input %d", u2.InputTokensDetails.CachedTokens, u2.InputTokens)
	}

	// The counters name the endpoint.
	snap := e.control.snapshot()
	var n uint64
	for _, c := range snap.Counters {
		if c.Endpoint == "responses" && c.Model == "test-model" && c.RequestClass == classGateway {
			n = c.Count
		}
	}
	if n != 2 {
		t.Fatalf("responses counter %d, want 2 (%+v)", n, snap.Counters)
	}
}

// TestResponsesRenderMatchesChat: the same conversation sent through chat
// and then through Responses hits the whole prompt's full blocks.
func TestResponsesRenderMatchesChat(t *testing.T) {
	e, url := startServer(t, fastConfig())
	chat := `{"model":"m","messages":[{"role":"system","content":` + jsonString(longSystem) + `},{"role":"user","content":"q"}]}`
	r := postJSON(t, url+"/v1/chat/completions", chat, nil)
	_, _ = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	body := `{"model":"m","instructions":` + jsonString(longSystem) + `,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"q"}]}]}`
	resp := postJSON(t, url+"/v1/responses", body, nil)
	defer resp.Body.Close()
	var out struct {
		Usage responsesUsage `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	prompt := e.kv.NewSequence([]byte("system:" + longSystem + "\nuser:q\n"))
	wantCached := prompt.Tokens() / 16 * 16
	if out.Usage.InputTokens != prompt.Tokens() || out.Usage.InputTokensDetails.CachedTokens != wantCached {
		t.Fatalf("usage %+v, want input %d cached %d", out.Usage, prompt.Tokens(), wantCached)
	}
	if h := resp.Header.Get("x-kv-cache-hit-tokens"); h == "" || h == "0" {
		t.Fatalf("x-kv-cache-hit-tokens %q", h)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestResponsesStreamWire checks the SSE framing the SDK hides: named
// events, data lines, no [DONE], and stats events like a streamed chat.
func TestResponsesStreamWire(t *testing.T) {
	_, url := startServer(t, fastConfig())
	resp := postJSON(t, url+"/v1/responses", `{"model":"m","input":"x","stream":true}`, map[string]string{"x-output-tokens": "2", "x-request-id": "r-1"})
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var events []string
	var pendingEvent string
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			pendingEvent = name
			continue
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			if data == "[DONE]" {
				t.Fatal("Responses stream sent [DONE]")
			}
			var v struct {
				Type       string `json:"type"`
				ResponseID string `json:"response_id"`
				Response   struct {
					ID string `json:"id"`
				} `json:"response"`
			}
			if err := json.Unmarshal([]byte(data), &v); err != nil {
				t.Fatalf("data %q: %v", data, err)
			}
			if v.Type != pendingEvent || (v.ResponseID != "r-1" && v.Response.ID != "r-1") {
				t.Fatalf("event %q carries %s", pendingEvent, data)
			}
			events = append(events, v.Type)
		}
	}
	want := "response.created,response.output_text.delta,response.output_text.delta,response.completed"
	if strings.Join(events, ",") != want {
		t.Fatalf("events %v, want %s", events, want)
	}
}

func TestResponsesBadInput(t *testing.T) {
	_, url := startServer(t, fastConfig())
	cases := []struct {
		name, body  string
		code, param string
	}{
		{"malformed json", `{"model":`, "invalid_json", ""},
		{"missing model", `{"input":"x"}`, "missing_field", "model"},
		{"missing input", `{"model":"m"}`, "missing_field", "input"},
		{"null input", `{"model":"m","input":null}`, "missing_field", "input"},
		{"empty input array", `{"model":"m","input":[]}`, "missing_field", "input"},
		{"input number", `{"model":"m","input":5}`, "invalid_type", "input"},
		{"input item number", `{"model":"m","input":[5]}`, "invalid_type", "input[0]"},
		{"role not string", `{"model":"m","input":[{"role":3,"content":"x"}]}`, "invalid_type", "input[0].role"},
		{"content wrong type", `{"model":"m","input":[{"role":"user","content":7}]}`, "invalid_type", "input[0].content"},
		{"part not object", `{"model":"m","input":[{"role":"user","content":["x"]}]}`, "invalid_type", "input[0].content"},
		{"instructions not string", `{"model":"m","input":"x","instructions":1}`, "invalid_type", "instructions"},
		{"stream not bool", `{"model":"m","input":"x","stream":"yes"}`, "invalid_type", "stream"},
		{"max_output_tokens zero", `{"model":"m","input":"x","max_output_tokens":0}`, "invalid_value", "max_output_tokens"},
		{"max_output_tokens string", `{"model":"m","input":"x","max_output_tokens":"3"}`, "invalid_type", "max_output_tokens"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := postJSON(t, url+"/v1/responses", c.body, nil)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400", resp.StatusCode)
			}
			e := decodeError(t, resp)
			if e.Error.Code != c.code || e.Error.Param != c.param {
				t.Fatalf("error = %+v, want code %q param %q", e.Error, c.code, c.param)
			}
		})
	}
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/responses", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /v1/responses: %d", resp.StatusCode)
	}
	decodeError(t, resp)
}

// TestParseResponsesRendering pins the prompt bytes of the input forms.
func TestParseResponsesRendering(t *testing.T) {
	cases := []struct{ body, want string }{
		{`{"model":"m","input":"hi"}`, "user:hi\n"},
		{`{"model":"m","instructions":"be brief","input":"hi"}`, "system:be brief\nuser:hi\n"},
		{`{"model":"m","input":[{"role":"user","content":"a"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"b","annotations":[]}]}]}`,
			"user:a\nassistant:b\n"},
		{`{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":"42"}]}`,
			`{"call_id":"c","output":"42","type":"function_call_output"}` + "\n"},
		{`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"u"}]}]}`,
			`user:a{"image_url":"u","type":"input_image"}` + "\n"},
	}
	for _, c := range cases {
		g, e := parseResponses([]byte(c.body))
		if e != nil {
			t.Fatalf("%s: %v", c.body, e)
		}
		if string(g.prompt) != c.want || g.kind != "responses" {
			t.Fatalf("%s rendered %q, want %q", c.body, g.prompt, c.want)
		}
	}
}
